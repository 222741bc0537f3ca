// SPDX-License-Identifier: GPL-2.0

//! The command queue (erdma_rs_hw 3): a submission ring of 128-byte commands, a completion ring of
//! 32-byte big-endian entries, and an event queue that signals completions on vector 0 once the
//! completion ring is armed.
//!
//! Up to [`MAX_OUTSTANDING`] commands are in flight, each in a wait slot whose index travels in
//! the command header. Until [`Cmdq::enable_interrupts`], and always for [`Wait::Poll`] callers,
//! completions are found by polling the completion ring; afterwards a sleeping caller polls for
//! at most [`SPIN`], then sleeps until the vector-0 handler, [`Cmdq::handle_interrupt`], wakes
//! it. A command that does not complete within [`TIMEOUT`] disables the queue: every later
//! command fails with `ENODEV`, as the adapter's state is then unknown.

use core::marker::PhantomData;

use kernel::{
    device,
    dma::Coherent,
    io::{
        io_read,
        io_write,
        Io, //
    },
    new_condvar, new_spinlock_irq,
    prelude::*,
    sync::{
        barrier::{
            dma_mb,
            Read, //
        },
        CondVar,
        SpinLockIrq,
        SpinLockIrqGuard, //
    },
    task::might_sleep,
    time::{
        delay::{
            fsleep,
            udelay, //
        },
        msecs_to_jiffies,
        Delta,
        Instant,
        Monotonic, //
    },
};

use crate::{
    commands::{
        CmdHeader,
        Command,
        Reply, //
    },
    consts::{
        multiple_of,
        CQE_SIZE,
        WQEBB_SIZE, //
    },
    eq::EqRing,
    formats::{
        low64,
        CmdqCqe,
        CmdqSqDoorbell,
        CqDoorbell,
        CqeHeader, //
    },
    regs::{
        self,
        Bar0, //
    },
    report::DeviceReports,
    ring::{
        lower,
        owner_valid,
        read_entry,
        upper,
        words64,
        Doorbell, //
    },
};

/// Commands in flight at most.
pub(crate) const MAX_OUTSTANDING: usize = 128;
/// WQEBBs per command: every command takes a 128-byte slot.
const CMD_WQEBBS: u16 = 4;
/// Largest command body (the slot less the header).
const MAX_BODY: usize = CMD_WQEBBS as usize * WQEBB_SIZE - 8;
/// Submission ring depth in WQEBBs.
pub(crate) const SQ_DEPTH: u16 = MAX_OUTSTANDING as u16 * CMD_WQEBBS;
/// Completion ring depth (as many entries as the submission ring has WQEBBs).
pub(crate) const CQ_DEPTH: u32 = SQ_DEPTH as u32;
/// Event ring depth.
pub(crate) const EQ_DEPTH: u16 = 128;
/// How long a command may take.
pub(crate) const TIMEOUT: Delta = Delta::from_secs(15);
/// Polling interval.
const POLL_INTERVAL: Delta = Delta::from_micros(20);

/// How long a sleeping waiter polls the completion ring before it sleeps. A command the
/// adapter completes within it is collected without the interrupt's round trip (the handler,
/// then waking the waiter); one that takes longer costs this much CPU time more. With the
/// device model most commands complete within it, and a command then takes a third of the
/// time (`Documentation/infiniband/erdma_rs_performance.rst`).
const SPIN: Delta = Delta::from_micros(30);

/// The pause between two polls of the spin.
const SPIN_STEP: Delta = Delta::from_micros(1);

/// How a caller waits for its command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Process context: sleep until the completion interrupt (or poll with sleeps while the queue
    /// is still in polling mode).
    Sleep,
    /// Any context: busy-poll the completion ring.
    Poll,
}

/// A command's outcome as the adapter reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// The two response words.
    Success([u64; 2]),
    Status(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    /// Posted, not completed; `Slots::pos_slot` knows where.
    Busy,
    Done(Outcome),
    /// Its waiter gave up; the slot is freed when (if ever) the completion arrives.
    Abandoned,
}

/// The submission-ring position, in commands, of the command whose first WQEBB is `index`.
fn cmd_pos(index: u16) -> usize {
    usize::from(index / CMD_WQEBBS) % MAX_OUTSTANDING
}

/// Why a completion was refused: the adapter named a command that is not in flight there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BadCompletion {
    /// No command in flight starts at that index.
    NotInFlight,
    /// The index is not a command's start, or the header there names another slot.
    Mismatch,
}

/// The wait slots and where their commands sit in the submission ring: the command queue's
/// state machine, without the hardware (KUnit drives it directly).
///
/// A slot is `Free`, then `Busy` from its posting until its completion, then `Done` until its
/// waiter collects it; a waiter that gives up leaves it `Abandoned`, freed by its completion.
/// A ring position is taken from posting to completion: the next command waits for the
/// position as well as for a free slot.
struct Slots {
    /// Submission producer index, in WQEBBs (16-bit, as in the header).
    sq_pi: u16,
    slots: [Slot; MAX_OUTSTANDING],
    /// For each submission-ring position (in commands), the slot of the command posted there
    /// that has not completed yet.
    pos_slot: [Option<u8>; MAX_OUTSTANDING],
}

impl Slots {
    const fn new() -> Self {
        Self {
            sq_pi: 0,
            slots: [Slot::Free; MAX_OUTSTANDING],
            pos_slot: [None; MAX_OUTSTANDING],
        }
    }

    /// A slot for the next command, if one is free and the next ring position is too.
    fn free_slot(&self) -> Option<usize> {
        if self.pos_slot[cmd_pos(self.sq_pi)].is_some() {
            return None;
        }
        self.slots.iter().position(|s| *s == Slot::Free)
    }

    /// Takes `slot` (from [`Slots::free_slot`]) for a command at the producer index; returns
    /// the index the command starts at and the producer index after it.
    fn post(&mut self, slot: usize) -> (u16, u16) {
        let pi = self.sq_pi;
        let next = pi.wrapping_add(CMD_WQEBBS);
        self.slots[slot] = Slot::Busy;
        // CAST: `slot` < `MAX_OUTSTANDING` = 128.
        self.pos_slot[cmd_pos(pi)] = Some(slot as u8);
        self.sq_pi = next;
        (pi, next)
    }

    /// The slot of the command in flight at ring index `start`, if any.
    fn in_flight(&self, start: u16) -> Option<usize> {
        self.pos_slot[cmd_pos(start)].map(usize::from)
    }

    /// Records the completion of the command that started at `start`, whose header there
    /// carries `cookie` (the slot it was posted from).
    fn complete(
        &mut self,
        start: u16,
        cookie: Option<u64>,
        outcome: Outcome,
    ) -> core::result::Result<(), BadCompletion> {
        let slot = self.in_flight(start).ok_or(BadCompletion::NotInFlight)?;
        if cookie != Some(slot as u64) || !multiple_of(u64::from(start), u64::from(CMD_WQEBBS)) {
            return Err(BadCompletion::Mismatch);
        }
        self.pos_slot[cmd_pos(start)] = None;
        self.slots[slot] = match self.slots[slot] {
            Slot::Abandoned => Slot::Free,
            _ => Slot::Done(outcome),
        };
        Ok(())
    }

    /// Collects the outcome of `slot` once it completed, freeing it.
    fn collect(&mut self, slot: usize) -> Option<Outcome> {
        let Slot::Done(outcome) = self.slots[slot] else {
            return None;
        };
        self.slots[slot] = Slot::Free;
        Some(outcome)
    }

    /// Lets go of `slot` without its outcome: freed now if it completed, else by its
    /// completion.
    fn abandon(&mut self, slot: usize) {
        self.slots[slot] = match self.slots[slot] {
            Slot::Busy | Slot::Abandoned => Slot::Abandoned,
            Slot::Done(_) | Slot::Free => Slot::Free,
        };
    }
}

struct State {
    slots: Slots,
    /// Completion consumer index.
    cq_ci: u32,
    /// Completion events consumed, for the arm doorbell.
    cmdsn: u32,
    interrupts: bool,
    disabled: bool,
    /// Posters waiting for a free slot or ring position: woken when a waiter frees one.
    slot_waiters: u32,
}

/// The command queue.
#[pin_data]
pub(crate) struct Cmdq {
    /// Submission ring, as little-endian 64-bit words.
    sq: Coherent<[u64]>,
    /// Completion ring, as 32-bit words (big-endian on the wire).
    cq: Coherent<[u32]>,
    /// Submission doorbell: the new producer index.
    sq_db: Doorbell,
    /// Completion-ring arm doorbell.
    cq_db: Doorbell,
    /// The event queue, consumed and re-armed only by the vector-0 handler; never held with
    /// `state`.
    #[pin]
    eq: SpinLockIrq<EqRing>,
    #[pin]
    state: SpinLockIrq<State>,
    #[pin]
    done: CondVar,
}

/// 64-bit words per WQEBB.
const WQEBB_WORDS: usize = WQEBB_SIZE / 8;
/// 32-bit words per completion entry.
const CQE_WORDS: usize = CQE_SIZE / 4;
const SQ_WORDS: usize = SQ_DEPTH as usize * WQEBB_WORDS;
const CQ_WORDS: usize = CQ_DEPTH as usize * CQE_WORDS;

impl Cmdq {
    /// Allocates the rings. Nothing is posted until [`Cmdq::program`] told the adapter where
    /// they are.
    pub(crate) fn new(dev: &device::Device<device::Bound>) -> Result<impl PinInit<Self, Error>> {
        let sq = Coherent::zeroed_slice(dev, SQ_WORDS, GFP_KERNEL)?;
        let cq = Coherent::zeroed_slice(dev, CQ_WORDS, GFP_KERNEL)?;
        let sq_db = Doorbell::new(dev, regs::CMDQ_SQ_DB)?;
        let cq_db = Doorbell::new(dev, regs::CMDQ_CQ_DB)?;
        let eq = EqRing::new(dev, EQ_DEPTH, regs::eq_db(0))?;
        Ok(try_pin_init!(Self {
            sq,
            cq,
            sq_db,
            cq_db,
            eq <- new_spinlock_irq!(eq),
            state <- new_spinlock_irq!(State {
                slots: Slots::new(),
                cq_ci: 0,
                cmdsn: 0,
                interrupts: false,
                disabled: false,
                slot_waiters: 0,
            }),
            done <- new_condvar!("erdma_rs::cmdq::done"),
        }))
    }

    /// Writes the rings' addresses, depths and doorbell records into the adapter's registers
    /// (high halves first). They take effect at `DEV_CTRL.INIT`. The 64-bit writes cannot fail:
    /// their offsets lie in the register page.
    pub(crate) fn program(&self, bar: &Bar0<'_>) {
        let sq = self.sq.dma_address();
        let cq = self.cq.dma_address();
        bar.write_reg(regs::CMDQ_SQ_ADDR_H::from_raw(upper(sq)));
        bar.write_reg(regs::CMDQ_SQ_ADDR_L::from_raw(lower(sq)));
        bar.write_reg(regs::CMDQ_DEPTH::from_raw(u32::from(SQ_DEPTH)));
        let _ = bar.try_write64(self.sq_db.record_addr(), regs::CMDQ_SQ_DBREC_ADDR);
        bar.write_reg(regs::CMDQ_CQ_ADDR_H::from_raw(upper(cq)));
        bar.write_reg(regs::CMDQ_CQ_ADDR_L::from_raw(lower(cq)));
        let _ = bar.try_write64(self.cq_db.record_addr(), regs::CMDQ_CQ_DBREC_ADDR);
        let eq = self.eq.lock();
        let addr = eq.dma_addr();
        bar.write_reg(regs::CMDQ_EQ_ADDR_H::from_raw(upper(addr)));
        bar.write_reg(regs::CMDQ_EQ_ADDR_L::from_raw(lower(addr)));
        bar.write_reg(regs::CMDQ_EQ_DEPTH::from_raw(u32::from(eq.depth())));
        let _ = bar.try_write64(eq.dbrec_addr(), regs::CMDQ_EQ_DBREC_ADDR);
    }

    /// Switches from polling to interrupt-driven completions by arming the completion ring.
    pub(crate) fn enable_interrupts(&self, bar: &Bar0<'_>) {
        let mut state = self.state.lock();
        state.interrupts = true;
        self.cq_db.ring(bar, Self::cq_arm_value(&state));
    }

    /// Posts `cmd` and returns its pending completion, to be waited for with
    /// [`Pending::wait`]. With [`Wait::Sleep`] (process context only) a full queue is waited
    /// for by sleeping, with [`Wait::Poll`] by busy-polling.
    ///
    /// Fails with `ENODEV` once the queue is disabled and `EBUSY` if no slot frees up within
    /// [`TIMEOUT`].
    pub(crate) fn submit<'a, C: Command>(
        &'a self,
        ctx: CmdCtx<'a>,
        cmd: &C,
        wait: Wait,
    ) -> Result<Pending<'a, C>> {
        if wait == Wait::Sleep {
            might_sleep();
        }
        let budget = TimeBudget::start();
        let slot = self.post(ctx, cmd, wait, &budget)?;
        Ok(Pending {
            cmdq: self,
            ctx,
            slot: Some(slot),
            budget,
            _cmd: PhantomData,
        })
    }

    /// Posts `cmd` into a free slot, waiting for one if all are busy.
    fn post<C: Command>(
        &self,
        ctx: CmdCtx<'_>,
        cmd: &C,
        wait: Wait,
        budget: &TimeBudget,
    ) -> Result<usize> {
        const {
            assert!(
                core::mem::size_of::<C>() <= MAX_BODY,
                "command body too large"
            )
        };
        let body = cmd.as_bytes();
        let mut state = self.state.lock();
        loop {
            if state.disabled {
                return Err(ENODEV);
            }
            if let Some(slot) = state.slots.free_slot() {
                let pi = state.slots.sq_pi;
                let next = pi.wrapping_add(CMD_WQEBBS);
                let header = CmdHeader::zeroed()
                    .with_wqebb_index(next)
                    .with_opcode(C::OPCODE)
                    .with_submod(C::SUBMOD)
                    // CAST: `slot` < `MAX_OUTSTANDING` = 128.
                    .with_cookie(slot as u16)
                    .with_wqebbs_minus_one(low64(u64::from(CMD_WQEBBS - 1)));
                let base = usize::from(pi % SQ_DEPTH) * WQEBB_WORDS;
                self.write_slot(base, header, body)?;
                state.slots.post(slot);
                self.sq_db
                    .ring(ctx.bar, CmdqSqDoorbell::zeroed().with_pi(next).into_raw());
                return Ok(slot);
            }
            // All slots (or the next ring position) are busy: wait for a completion.
            if budget.spent() {
                dev_err!(
                    ctx.dev,
                    "command queue full for {} s\n",
                    TIMEOUT.as_millis() / 1000
                );
                return Err(EBUSY);
            }
            state.slot_waiters += 1;
            state = self.await_progress(ctx, state, wait, budget, |st| {
                st.slots.free_slot().is_some()
            });
            state.slot_waiters -= 1;
        }
    }

    /// Copies the header and body of a command into the submission ring at word `base`.
    fn write_slot(&self, base: usize, header: CmdHeader, body: &[u8]) -> Result {
        io_write!(&self.sq, [try: base], header.into_raw());
        for (i, word) in words64(body).enumerate() {
            io_write!(&self.sq, [try: base + 1 + i], word);
        }
        Ok(())
    }

    /// Waits until slot `slot` completes, and frees it.
    fn wait_for(
        &self,
        ctx: CmdCtx<'_>,
        slot: usize,
        wait: Wait,
        budget: &TimeBudget,
    ) -> Result<Outcome> {
        let mut state = self.state.lock();
        // Before sleeping, poll for a while (see `SPIN`).
        if wait == Wait::Sleep {
            let spin = Instant::<Monotonic>::now();
            loop {
                self.poll_cq(ctx.dev, ctx.reports, &mut state);
                if matches!(state.slots.slots[slot], Slot::Done(_)) || spin.elapsed() >= SPIN {
                    break;
                }
                drop(state);
                udelay(SPIN_STEP);
                state = self.state.lock();
            }
        }
        loop {
            if let Some(outcome) = state.slots.collect(slot) {
                let slot_waiters = state.slot_waiters > 0;
                drop(state);
                if slot_waiters {
                    self.done.notify_all();
                }
                return Ok(outcome);
            }
            if state.disabled {
                // The adapter failed (or another command timed out) meanwhile.
                state.slots.abandon(slot);
                return Err(ENODEV);
            }
            if budget.spent() {
                state.slots.abandon(slot);
                state.disabled = true;
                drop(state);
                dev_err!(
                    ctx.dev,
                    "command timed out after {} s: the command queue is disabled; rebind the \
                     driver to recover\n",
                    TIMEOUT.as_millis() / 1000
                );
                self.done.notify_all();
                return Err(ETIMEDOUT);
            }
            state = self.await_progress(ctx, state, wait, budget, |st| {
                matches!(st.slots.slots[slot], Slot::Done(_))
            });
        }
    }

    /// Lets go of slot `slot` without waiting: freed now if it completed, else when (if ever)
    /// its completion arrives.
    fn abandon(&self, slot: usize) {
        self.state.lock().slots.abandon(slot);
        self.done.notify_all();
    }

    /// Waits for completions to make progress: in interrupt mode and process context, sleeps
    /// until the vector-0 handler wakes it (or the deadline); otherwise polls the completion ring
    /// and, unless `ready` then holds, pauses with the lock dropped.
    fn await_progress<'a>(
        &'a self,
        ctx: CmdCtx<'_>,
        mut state: SpinLockIrqGuard<'a, State>,
        wait: Wait,
        budget: &TimeBudget,
        ready: impl Fn(&State) -> bool,
    ) -> SpinLockIrqGuard<'a, State> {
        if wait == Wait::Sleep && state.interrupts {
            let _ = self.done.wait_timeout(&mut state, budget.jiffies_left());
            return state;
        }
        self.poll_cq(ctx.dev, ctx.reports, &mut state);
        if ready(&state) {
            return state;
        }
        drop(state);
        pause(wait);
        self.state.lock()
    }

    /// The vector-0 work for the command queue: consume the CMDQ EQ; if it had events, collect
    /// completions, wake waiters and re-arm the completion ring; always re-arm the EQ.
    ///
    /// The doorbells are rung with no lock held and after the wake-up: under emulation an MMIO
    /// write is a round trip to the device model, and a woken waiter (or the next command's
    /// poster) would otherwise spin on `state` through two of them.
    pub(crate) fn handle_interrupt(
        &self,
        dev: &device::Device,
        reports: &DeviceReports,
        bar: &Bar0<'_>,
    ) {
        // The EQ's entries only signal completions: counted, not read.
        let events = self.eq.lock().skip_all();
        if events > 0 {
            let mut state = self.state.lock();
            state.cmdsn = state.cmdsn.wrapping_add(1);
            self.poll_cq(dev, reports, &mut state);
            let arm = state.interrupts.then(|| Self::cq_arm_value(&state));
            drop(state);
            self.done.notify_all();
            // Only this handler arms once interrupts are on, so arms cannot overtake each other.
            if let Some(db) = arm {
                self.cq_db.ring(bar, db);
            }
        }
        self.eq.lock().arm(bar);
    }

    /// Consumes the valid completion entries, one ring's worth at most.
    fn poll_cq(&self, dev: &device::Device, reports: &DeviceReports, state: &mut State) {
        for _ in 0..CQ_DEPTH {
            let Ok(Some(cqe)) = self.next_cqe(state) else {
                break;
            };
            let status = cqe.header().status().get();
            let resp = cqe.response();
            self.complete(dev, reports, state, cqe.sq_index.get(), status, resp);
        }
    }

    /// Reads and consumes the next valid completion entry.
    fn next_cqe(&self, state: &mut State) -> Result<Option<CmdqCqe>> {
        let base = (state.cq_ci % CQ_DEPTH) as usize * CQE_WORDS;
        let word0 = CqeHeader::from_raw(u32::from_be(io_read!(&self.cq, [try: base])));
        if !owner_valid(word0.owner().into(), state.cq_ci, CQ_DEPTH) {
            return Ok(None);
        }
        // The entry only after its owner bit.
        dma_mb(Read);
        let words: [u32; CQE_WORDS] = read_entry(&self.cq, base)?;
        state.cq_ci = state.cq_ci.wrapping_add(1);
        Ok(CmdqCqe::read_from_bytes(words.as_bytes()).ok())
    }

    /// Records the completion of the command that started at WQEBB index `start`.
    fn complete(
        &self,
        dev: &device::Device,
        reports: &DeviceReports,
        state: &mut State,
        start: u32,
        status: u32,
        resp: [u64; 2],
    ) {
        // CAST: masked to the 16-bit index space of the submission ring.
        let start = (start & 0xffff) as u16;
        // The header's cookie must name the slot posted there: a mismatch means the adapter
        // echoed a wrong index.
        let base = usize::from(start % SQ_DEPTH) * WQEBB_WORDS;
        let cookie = self
            .read_sq(base)
            .ok()
            .map(|h| CmdHeader::from_raw(h).cookie().get());
        let outcome = if status == 0 {
            Outcome::Success(resp)
        } else {
            // CAST: the status is an 8-bit field.
            Outcome::Status(status as u8)
        };
        match state.slots.complete(start, cookie, outcome) {
            Ok(()) => {}
            Err(BadCompletion::NotInFlight) => reports.report(
                dev,
                fmt!("completion for command index {start}, which is not in flight\n"),
            ),
            Err(BadCompletion::Mismatch) => reports.report(
                dev,
                fmt!("completion at command index {start} does not match its command\n"),
            ),
        }
    }

    fn read_sq(&self, word: usize) -> Result<u64> {
        Ok(io_read!(&self.sq, [try: word]))
    }

    /// Whether a command timeout, or [`Cmdq::fail`], has disabled the queue.
    pub(crate) fn is_disabled(&self) -> bool {
        self.state.lock().disabled
    }

    /// Disables the queue because the adapter failed: every command waited for, and every
    /// later one, fails with `ENODEV` at once rather than after [`TIMEOUT`].
    pub(crate) fn fail(&self) {
        self.state.lock().disabled = true;
        self.done.notify_all();
    }

    /// The doorbell that arms the completion ring for one event.
    fn cq_arm_value(state: &State) -> u64 {
        CqDoorbell::zeroed()
            .with_arm(true)
            .with_ci(low64(state.cq_ci.into()))
            .with_cmdsn(low64(state.cmdsn.into()))
            .with_seq(low64(state.cmdsn.into()))
            .into_raw()
    }
}

/// What posting and waiting need of the adapter: its device (for messages), its report
/// counters and its registers (for doorbells).
#[derive(Clone, Copy)]
pub(crate) struct CmdCtx<'a> {
    pub(crate) dev: &'a device::Device,
    pub(crate) reports: &'a DeviceReports,
    pub(crate) bar: &'a Bar0<'a>,
}

/// A command posted by [`Cmdq::submit`] whose completion has not been collected. Dropping it
/// without [`Pending::wait`] abandons the command: its slot is freed when it completes, and a
/// failure is then only counted.
#[must_use = "a posted command is abandoned unless waited for"]
pub(crate) struct Pending<'a, C: Command> {
    cmdq: &'a Cmdq,
    ctx: CmdCtx<'a>,
    /// `None` once waited for.
    slot: Option<usize>,
    budget: TimeBudget,
    _cmd: PhantomData<C>,
}

impl<C: Command> Pending<'_, C> {
    /// Waits for the command to complete and decodes its reply. [`Wait::Sleep`] only where
    /// sleeping is allowed.
    ///
    /// Fails with `EIO` if the adapter reports an error status, `ETIMEDOUT` if it does not
    /// answer within [`TIMEOUT`] of its posting (which disables the queue), and `ENODEV` once
    /// disabled.
    pub(crate) fn wait(mut self, wait: Wait) -> Result<C::Reply> {
        if wait == Wait::Sleep {
            might_sleep();
        }
        let slot = self.slot.take().ok_or(EINVAL)?;
        match self.cmdq.wait_for(self.ctx, slot, wait, &self.budget)? {
            Outcome::Success(words) => Ok(C::Reply::decode(words)),
            Outcome::Status(status) => {
                self.ctx.reports.report(
                    self.ctx.dev,
                    fmt!("command {} failed with status {:#x}\n", C::NAME, status),
                );
                Err(EIO)
            }
        }
    }
}

impl<C: Command> Drop for Pending<'_, C> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.cmdq.abandon(slot);
        }
    }
}

fn pause(wait: Wait) {
    match wait {
        Wait::Sleep => fsleep(POLL_INTERVAL),
        Wait::Poll => udelay(POLL_INTERVAL),
    }
}

/// The time a command has: [`TIMEOUT`] from when it was first posted.
struct TimeBudget {
    start: Instant<Monotonic>,
}

impl TimeBudget {
    fn start() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    fn spent(&self) -> bool {
        self.start.elapsed() >= TIMEOUT
    }

    fn jiffies_left(&self) -> kernel::time::Jiffies {
        let left = TIMEOUT - self.start.elapsed();
        // CAST: `left` is at most 15 s; negative values wait for one jiffy.
        msecs_to_jiffies(left.as_millis_ceil().max(1) as u32)
    }
}

#[kunit_tests(erdma_rs_cmdq)]
mod tests {
    use super::*;

    fn reply(n: u64) -> Outcome {
        Outcome::Success([n, 0])
    }

    /// Takes a free slot and posts into it; returns the slot and the command's start index.
    fn post(s: &mut Slots) -> Result<(usize, u16)> {
        let slot = s.free_slot().ok_or(EBUSY)?;
        Ok((slot, s.post(slot).0))
    }

    fn cookie(slot: usize) -> Option<u64> {
        Some(slot as u64)
    }

    #[test]
    fn a_command_completes_once_and_its_slot_comes_back() -> Result {
        let mut s = Slots::new();
        let (slot, start) = post(&mut s)?;
        assert_eq!(start, 0);
        assert_eq!(s.sq_pi, CMD_WQEBBS);
        assert_eq!(s.collect(slot), None);
        assert_eq!(s.complete(start, cookie(slot), reply(7)), Ok(()));
        // The same completion again names nothing in flight.
        assert_eq!(
            s.complete(start, cookie(slot), reply(8)),
            Err(BadCompletion::NotInFlight)
        );
        assert_eq!(s.collect(slot), Some(reply(7)));
        assert_eq!(s.collect(slot), None);
        assert_eq!(s.free_slot(), Some(slot));
        Ok(())
    }

    #[test]
    fn out_of_order_completions_reach_their_own_waiters() -> Result {
        let mut s = Slots::new();
        let (a, sa) = post(&mut s)?;
        let (b, sb) = post(&mut s)?;
        let (c, sc) = post(&mut s)?;
        assert!(a != b && b != c && a != c);
        assert_eq!(s.complete(sc, cookie(c), reply(3)), Ok(()));
        assert_eq!(s.complete(sa, cookie(a), Outcome::Status(5)), Ok(()));
        assert_eq!(s.complete(sb, cookie(b), reply(2)), Ok(()));
        assert_eq!(s.collect(b), Some(reply(2)));
        assert_eq!(s.collect(a), Some(Outcome::Status(5)));
        assert_eq!(s.collect(c), Some(reply(3)));
        Ok(())
    }

    #[test]
    fn a_wrong_cookie_or_index_is_refused_and_changes_nothing() -> Result {
        let mut s = Slots::new();
        let (slot, start) = post(&mut s)?;
        let other = slot + 1;
        assert_eq!(
            s.complete(start, cookie(other), reply(1)),
            Err(BadCompletion::Mismatch)
        );
        // An index inside the command rather than at its start.
        assert_eq!(
            s.complete(start + 1, cookie(slot), reply(1)),
            Err(BadCompletion::Mismatch)
        );
        assert_eq!(
            s.complete(start, None, reply(1)),
            Err(BadCompletion::Mismatch)
        );
        // A ring position nothing was posted to.
        assert_eq!(
            s.complete(start + CMD_WQEBBS, cookie(slot), reply(1)),
            Err(BadCompletion::NotInFlight)
        );
        assert_eq!(s.collect(slot), None);
        // The real completion still lands.
        assert_eq!(s.complete(start, cookie(slot), reply(9)), Ok(()));
        assert_eq!(s.collect(slot), Some(reply(9)));
        Ok(())
    }

    #[test]
    fn an_abandoned_command_frees_its_slot_at_completion() -> Result {
        let mut s = Slots::new();
        let (slot, start) = post(&mut s)?;
        s.abandon(slot);
        // Busy until the adapter is done with it: the next command takes another slot.
        assert!(s.free_slot() != Some(slot));
        assert_eq!(s.complete(start, cookie(slot), reply(1)), Ok(()));
        assert_eq!(s.collect(slot), None);
        assert_eq!(s.free_slot(), Some(slot));
        // Abandoning a completed command frees it at once.
        let (slot, start) = post(&mut s)?;
        assert_eq!(s.complete(start, cookie(slot), reply(2)), Ok(()));
        s.abandon(slot);
        assert_eq!(s.free_slot(), Some(slot));
        Ok(())
    }

    #[test]
    fn a_full_queue_waits_for_a_completion_and_its_ring_position() -> Result {
        let mut s = Slots::new();
        let mut posted = KVec::new();
        for _ in 0..MAX_OUTSTANDING {
            posted.push(post(&mut s)?, GFP_KERNEL)?;
        }
        assert_eq!(s.free_slot(), None);
        // A later command completing frees a slot, but the next ring position is still the
        // first command's.
        let (last, last_start) = posted[MAX_OUTSTANDING - 1];
        assert_eq!(s.complete(last_start, cookie(last), reply(1)), Ok(()));
        assert_eq!(s.collect(last), Some(reply(1)));
        assert_eq!(s.free_slot(), None);
        let (first, first_start) = posted[0];
        assert_eq!(s.complete(first_start, cookie(first), reply(1)), Ok(()));
        assert_eq!(s.collect(first), Some(reply(1)));
        assert!(s.free_slot().is_some());
        Ok(())
    }

    #[test]
    fn the_producer_index_wraps_and_positions_follow() -> Result {
        let mut s = Slots::new();
        // Past the 16-bit index space twice.
        for i in 0..(2 * 65536 / usize::from(CMD_WQEBBS) + 3) {
            let (slot, start) = post(&mut s)?;
            assert_eq!(usize::from(start), (i * usize::from(CMD_WQEBBS)) % 65536);
            assert_eq!(s.complete(start, cookie(slot), reply(1)), Ok(()));
            assert_eq!(s.collect(slot), Some(reply(1)));
        }
        Ok(())
    }
}
