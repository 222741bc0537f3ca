// SPDX-License-Identifier: GPL-2.0

//! The command queue (erdma-hw 3): a submission ring of 128-byte commands, a completion ring of
//! 32-byte big-endian entries, and an event queue that signals completions on vector 0 once the
//! completion ring is armed.
//!
//! Up to [`MAX_OUTSTANDING`] commands are in flight, each in a wait slot whose index travels in
//! the command header. Until [`Cmdq::enable_interrupts`], and always for [`Wait::Poll`] callers,
//! completions are found by polling the completion ring; afterwards the vector-0 handler calls
//! [`Cmdq::handle_interrupt`] and sleeping callers are woken. A command that does not complete
//! within [`TIMEOUT`] disables the queue: every later command fails with `ENODEV`, as the
//! adapter's state is then unknown.

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
        Response, //
    },
    consts::{
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
    Success(Response),
    Status(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    /// Posted, not completed; `State::pos_slot` knows where.
    Busy,
    Done(Outcome),
    /// Its waiter gave up; the slot is freed when (if ever) the completion arrives.
    Abandoned,
}

/// The submission-ring position, in commands, of the command whose first WQEBB is `index`.
fn cmd_pos(index: u16) -> usize {
    usize::from(index / CMD_WQEBBS) % MAX_OUTSTANDING
}

struct State {
    /// Submission producer index, in WQEBBs (16-bit, as in the header).
    sq_pi: u16,
    /// Completion consumer index.
    cq_ci: u32,
    /// Completion events consumed, for the arm doorbell.
    cmdsn: u32,
    slots: [Slot; MAX_OUTSTANDING],
    /// For each submission-ring position (in commands), the slot of the command posted there
    /// that has not completed yet.
    pos_slot: [Option<u8>; MAX_OUTSTANDING],
    interrupts: bool,
    disabled: bool,
}

impl State {
    fn free_slot(&self) -> Option<usize> {
        if self.pos_slot[cmd_pos(self.sq_pi)].is_some() {
            return None;
        }
        self.slots.iter().position(|s| *s == Slot::Free)
    }
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
                sq_pi: 0,
                cq_ci: 0,
                cmdsn: 0,
                slots: [Slot::Free; MAX_OUTSTANDING],
                pos_slot: [None; MAX_OUTSTANDING],
                interrupts: false,
                disabled: false,
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

    /// Runs `cmd` and returns the adapter's response.
    ///
    /// Fails with `EIO` if the adapter reports an error status, `ETIMEDOUT` if it does not
    /// answer within [`TIMEOUT`] (which disables the queue), and `ENODEV` once disabled.
    pub(crate) fn exec<C: Command>(
        &self,
        dev: &device::Device,
        reports: &DeviceReports,
        bar: &Bar0<'_>,
        cmd: &C,
        wait: Wait,
    ) -> Result<Response> {
        let budget = TimeBudget::start();
        let slot = self.post(dev, reports, bar, cmd, wait, &budget)?;
        match self.wait_for(dev, reports, slot, wait, &budget)? {
            Outcome::Success(resp) => Ok(resp),
            Outcome::Status(status) => {
                reports.report(
                    dev,
                    fmt!("command {} failed with status {:#x}\n", C::NAME, status),
                );
                Err(EIO)
            }
        }
    }

    /// Posts `cmd` into a free slot, waiting for one if all are busy.
    fn post<C: Command>(
        &self,
        dev: &device::Device,
        reports: &DeviceReports,
        bar: &Bar0<'_>,
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
            if let Some(slot) = state.free_slot() {
                let pi = state.sq_pi;
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
                state.slots[slot] = Slot::Busy;
                // CAST: `slot` < 128.
                state.pos_slot[cmd_pos(pi)] = Some(slot as u8);
                state.sq_pi = next;
                self.sq_db
                    .ring(bar, CmdqSqDoorbell::zeroed().with_pi(next).into_raw());
                return Ok(slot);
            }
            // All slots (or the next ring position) are busy: wait for a completion.
            if budget.spent() {
                dev_err!(
                    dev,
                    "command queue full for {} s\n",
                    TIMEOUT.as_millis() / 1000
                );
                return Err(EBUSY);
            }
            state = self.await_progress(dev, reports, state, wait, budget, |st| {
                st.free_slot().is_some()
            });
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
        dev: &device::Device,
        reports: &DeviceReports,
        slot: usize,
        wait: Wait,
        budget: &TimeBudget,
    ) -> Result<Outcome> {
        let mut state = self.state.lock();
        loop {
            if let Slot::Done(outcome) = state.slots[slot] {
                state.slots[slot] = Slot::Free;
                drop(state);
                // Somebody may be waiting for a free slot.
                self.done.notify_all();
                return Ok(outcome);
            }
            if budget.spent() {
                if state.slots[slot] == Slot::Busy {
                    state.slots[slot] = Slot::Abandoned;
                }
                state.disabled = true;
                drop(state);
                dev_err!(
                    dev,
                    "command timed out after {} s: the command queue is disabled; rebind the \
                     driver to recover\n",
                    TIMEOUT.as_millis() / 1000
                );
                self.done.notify_all();
                return Err(ETIMEDOUT);
            }
            state = self.await_progress(dev, reports, state, wait, budget, |st| {
                matches!(st.slots[slot], Slot::Done(_))
            });
        }
    }

    /// Waits for completions to make progress: in interrupt mode and process context, sleeps
    /// until the vector-0 handler wakes it (or the deadline); otherwise polls the completion ring
    /// and, unless `ready` then holds, pauses with the lock dropped.
    fn await_progress<'a>(
        &'a self,
        dev: &device::Device,
        reports: &DeviceReports,
        mut state: SpinLockIrqGuard<'a, State>,
        wait: Wait,
        budget: &TimeBudget,
        ready: impl Fn(&State) -> bool,
    ) -> SpinLockIrqGuard<'a, State> {
        if wait == Wait::Sleep && state.interrupts {
            let _ = self.done.wait_timeout(&mut state, budget.jiffies_left());
            return state;
        }
        self.poll_cq(dev, reports, &mut state);
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
        let mut events = 0u32;
        {
            let mut eq = self.eq.lock();
            while eq.pop().is_some() {
                events += 1;
            }
        }
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

    /// Consumes every valid completion entry.
    fn poll_cq(&self, dev: &device::Device, reports: &DeviceReports, state: &mut State) {
        while let Ok(Some(cqe)) = self.next_cqe(state) {
            let status = cqe.header().status().get();
            let resp = Response(cqe.response());
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
        resp: Response,
    ) {
        // CAST: masked to the 16-bit index space of the submission ring.
        let start = (start & 0xffff) as u16;
        let pos = cmd_pos(start);
        let Some(slot) = state.pos_slot[pos].map(usize::from) else {
            reports.report(
                dev,
                fmt!("completion for command index {start}, which is not in flight\n"),
            );
            return;
        };
        // The header's cookie must name the same slot: a mismatch means the adapter echoed a
        // wrong index.
        let base = usize::from(start % SQ_DEPTH) * WQEBB_WORDS;
        let cookie = self
            .read_sq(base)
            .map(|h| CmdHeader::from_raw(h).cookie().get())
            .unwrap_or(u64::MAX);
        if cookie != slot as u64 || !start.is_multiple_of(CMD_WQEBBS) {
            reports.report(
                dev,
                fmt!("completion at command index {start} does not match its command\n"),
            );
            return;
        }
        state.pos_slot[pos] = None;
        let outcome = if status == 0 {
            Outcome::Success(resp)
        } else {
            // CAST: the status is an 8-bit field.
            Outcome::Status(status as u8)
        };
        state.slots[slot] = match state.slots[slot] {
            Slot::Abandoned => Slot::Free,
            _ => Slot::Done(outcome),
        };
    }

    fn read_sq(&self, word: usize) -> Result<u64> {
        Ok(io_read!(&self.sq, [try: word]))
    }

    /// Whether a command timeout has disabled the queue.
    pub(crate) fn is_disabled(&self) -> bool {
        self.state.lock().disabled
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
