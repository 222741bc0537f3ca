// SPDX-License-Identifier: GPL-2.0

//! Rust driver for Alibaba's Elastic RDMA Adapter (eRDMA).
//!
//! The adapter is a PCI function (1ded:107f) with two memory BARs: BAR0 holds a page of registers
//! followed by the doorbell spaces, BAR2 holds the MSI-X table. It is paired with a virtio-net
//! function that carries the same MAC address.
//!
//! Bring-up follows the adapter's handshake: the asynchronous event queue and the command queue
//! are described in registers and latched by `DEV_CTRL.INIT`; completion event queues are then
//! created by command, one per MSI-X vector after vector 0, while the command queue still polls;
//! finally the command queue switches to interrupts and the adapter's capabilities are queried.

use kernel::{
    device::{
        self,
        Bound,
        Core, //
    },
    dma::DmaMask,
    fmt,
    io::Io,
    irq::{
        self,
        IrqReturn,
        NamedRegistration, //
    },
    net::device::NetDevice,
    new_mutex, new_spinlock_irq,
    page::PAGE_SHIFT,
    pci,
    prelude::*,
    str::CString,
    sync::{
        Arc,
        Mutex,
        SpinLockIrq, //
    },
    time::{
        delay::fsleep,
        Delta, //
    },
};

mod cmdq;
mod commands;
mod eq;
mod ids;
mod kverbs;
mod objects;
mod regs;
mod ring;
mod verbs;

use cmdq::{
    Cmdq,
    Wait, //
};
use commands::{
    ConfDevice,
    CreateEq,
    DestroyEq,
    DeviceCaps,
    QueryDevice,
    QueryFwInfo,
    EQ_TYPE_CEQ, //
};
use eq::EqRing;
use kernel::{rbtree::RBTree, rdma::qp::QpEvent};
use kverbs::{
    CqEntry,
    QpEntry, //
};
use regs::{
    MacAddr,
    Protocol, //
};
use ring::{
    lower,
    upper, //
};
use verbs::{
    IbData,
    IbDevice, //
};

/// PCI device ID of the eRDMA function.
const PCI_DEVICE_ID_ERDMA: u32 = 0x107f;

/// BAR0, mapped whole; accesses inside the register page are checked at compile time.
pub(crate) type Bar0<'bound> = pci::Bar<'bound, { regs::REG_PAGE_SIZE }>;

/// Depth of the asynchronous event queue.
const AEQ_DEPTH: u16 = 4096;
/// Depth of each completion event queue.
const CEQ_DEPTH: u16 = 4096;
/// Completion event queues at most: one per MSI-X vector after vector 0.
const MAX_CEQS: u32 = 31;
/// Event-queue entries handled per interrupt before re-arming.
const EQ_BUDGET: usize = 16;
/// How often, and how many times, `DEV_STATUS.INIT_DONE` is polled.
const INIT_POLL_INTERVAL: Delta = Delta::from_millis(20);
const INIT_POLL_TRIES: u32 = 500;

/// The adapter's registers and control queues, shared with the interrupt handlers.
#[pin_data]
struct Hw<'bound> {
    pdev: &'bound pci::Device<Bound>,
    bar: Bar0<'bound>,
    #[pin]
    cmdq: Cmdq,
    #[pin]
    aeq: SpinLockIrq<EqRing>,
    /// Event handles of the completion queues, by CQN, for the CEQ handlers.
    #[pin]
    cqs: SpinLockIrq<RBTree<u32, Arc<CqEntry>>>,
    /// Event handles of the queue pairs, by QPN, for the AEQ handler.
    #[pin]
    qps: SpinLockIrq<RBTree<u32, Arc<QpEntry>>>,
}

impl<'bound> Hw<'bound> {
    fn dev(&self) -> &device::Device {
        self.pdev.as_ref()
    }

    /// Returns the function to its power-on state. The adapter does not signal completion to
    /// the driver (`DEV_STATUS.reset_done` is informational).
    fn reset(&self) {
        self.bar
            .write_reg(regs::DEV_CTRL::zeroed().with_reset(true));
    }

    /// Describes the AEQ and the command queue to the adapter and lets it latch them.
    fn init(&self) -> Result {
        {
            let aeq = self.aeq.lock();
            let addr = aeq.dma_addr();
            self.bar.write_reg(regs::AEQ_ADDR_H::from_raw(upper(addr)));
            self.bar.write_reg(regs::AEQ_ADDR_L::from_raw(lower(addr)));
            self.bar
                .write_reg(regs::AEQ_DEPTH::from_raw(aeq.depth().into()));
            // Cannot fail: the offset lies in the register page.
            let _ = self.bar.try_write64(aeq.dbrec_addr(), regs::AEQ_DBREC_ADDR);
        }
        self.cmdq.program(&self.bar);
        self.bar.write_reg(regs::DEV_CTRL::zeroed().with_init(true));
        for _ in 0..INIT_POLL_TRIES {
            if self.bar.read(regs::DEV_STATUS).init_done() {
                return Ok(());
            }
            fsleep(INIT_POLL_INTERVAL);
        }
        dev_err!(
            self.dev(),
            "the adapter did not complete initialisation within {} ms\n",
            INIT_POLL_INTERVAL.as_millis() * i64::from(INIT_POLL_TRIES)
        );
        Err(ETIMEDOUT)
    }

    fn exec<C: commands::Command>(&self, cmd: &C, wait: Wait) -> Result<commands::Response> {
        self.cmdq.exec(self.dev(), &self.bar, cmd, wait)
    }

    /// Drains up to [`EQ_BUDGET`] asynchronous events and re-arms the AEQ.
    fn handle_aeq(&self) {
        let mut aeq = self.aeq.lock();
        for _ in 0..EQ_BUDGET {
            let Some(eqe) = aeq.pop() else {
                break;
            };
            let kind = (eqe.0[0] >> 16) & 0xff;
            let subtype = eqe.0[0] & 0xff;
            let object = eqe.0[1];
            let (what, found) = match kind {
                // Every QP event is fatal to the QP (erdma-hw 4.2).
                0 | 1 | 2 | 4 => {
                    let qps = self.qps.lock();
                    let found = qps.get(&object).map(|q| q.events.event(QpEvent::Fatal));
                    ("error on QP", found.is_some())
                }
                3 => {
                    let cqs = self.cqs.lock();
                    (
                        "error on CQ",
                        cqs.get(&object).map(|c| c.events.error()).is_some(),
                    )
                }
                _ => ("unknown event for object", false),
            };
            if !found {
                dev_warn!(
                    self.dev(),
                    "async event {kind}.{subtype}: {what} {object}, which does not exist\n"
                );
            }
        }
        aeq.arm(&self.bar);
    }
}

/// Vector 0: command completions, then asynchronous events.
struct CommonIrq<'bound> {
    hw: Arc<Hw<'bound>>,
}

impl irq::Handler for CommonIrq<'_> {
    fn handle(&self) -> IrqReturn {
        self.hw.cmdq.handle_interrupt(self.hw.dev(), &self.hw.bar);
        self.hw.handle_aeq();
        IrqReturn::Handled
    }
}

/// A completion event queue's interrupt.
struct CeqIrq<'bound> {
    hw: Arc<Hw<'bound>>,
    ring: Arc<SpinLockIrq<EqRing>>,
    eqn: u16,
}

impl irq::Handler for CeqIrq<'_> {
    fn handle(&self) -> IrqReturn {
        let mut ring = self.ring.lock();
        for _ in 0..EQ_BUDGET {
            let Some(eqe) = ring.pop() else {
                break;
            };
            let cqn = eqe.0[0] & 0xf_ffff;
            let found = self.hw.cqs.lock().get(&cqn).map(|c| {
                if let Some(k) = &c.kernel {
                    k.event();
                }
                c.events.completion();
            });
            if found.is_none() {
                // A CQ destroyed after the adapter queued its event.
                dev_dbg!(
                    self.hw.dev(),
                    "CEQ {}: event for CQ {}, which does not exist\n",
                    self.eqn,
                    cqn
                );
            }
        }
        ring.arm(&self.hw.bar);
        IrqReturn::Handled
    }
}

/// A completion event queue: hardware EQN `eqn` on MSI-X vector `eqn`.
struct Ceq<'bound> {
    irq: Option<Pin<KBox<NamedRegistration<'bound, CeqIrq<'bound>>>>>,
    ring: Arc<SpinLockIrq<EqRing>>,
    eqn: u16,
}

/// Everything that runs once the adapter is initialised. Dropping it tears the adapter down in
/// the order the adapter needs (erdma-hw 2.4): each CEQ's interrupt, then DESTROY_EQ, then its
/// ring; then a function reset; then the common interrupt. The rings of the AEQ and the command
/// queue go with the last reference to [`Hw`].
struct Running<'bound> {
    /// The RDMA device, unregistered first.
    ib: Option<IbDevice<'bound>>,
    hw: Arc<Hw<'bound>>,
    ceqs: KVec<Ceq<'bound>>,
    common: Option<Pin<KBox<NamedRegistration<'bound, CommonIrq<'bound>>>>>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        // Unregistering closes every user context and destroys every object, by command.
        self.ib = None;
        // With the command queue disabled, nothing can be destroyed by command: the reset
        // below stops the adapter's use of every ring.
        let destroy = !self.hw.cmdq.is_disabled();
        while let Some(Ceq { irq, ring, eqn }) = self.ceqs.pop() {
            // The interrupt first, then the adapter's use of the ring, then the ring.
            drop(irq);
            if destroy {
                let cmd = DestroyEq {
                    reserved0: 0,
                    // CAST: EQNs and vectors are below 32.
                    vector: eqn as u8,
                    eqn: eqn as u8,
                    reserved1: 0,
                    qtype: EQ_TYPE_CEQ,
                    reserved2: 0,
                };
                if let Err(e) = self.hw.exec(&cmd, Wait::Poll) {
                    dev_warn!(
                        self.hw.dev(),
                        "DESTROY_EQ {} failed: {}\n",
                        eqn,
                        e.to_errno()
                    );
                }
            }
            drop(ring);
        }
        self.hw.reset();
        self.common = None;
    }
}

/// What the driver keeps of a bound adapter.
#[pin_data]
struct Erdma<'bound> {
    /// Taken (and so torn down) at unbind, while the device is still enabled.
    #[pin]
    running: Mutex<Option<Running<'bound>>>,
}

struct ErdmaDriver;

kernel::pci_device_table!(
    PCI_TABLE,
    <ErdmaDriver as pci::Driver>::IdInfo,
    [(
        pci::DeviceId::from_id(pci::Vendor::ALIBABA, PCI_DEVICE_ID_ERDMA),
        ()
    )]
);

/// The name of an interrupt: `erdma-<what>@pci:<bdf>`.
fn irq_name(pdev: &pci::Device<Bound>, what: fmt::Arguments<'_>) -> Result<CString> {
    CString::try_from_fmt(fmt!("erdma-{}@pci:{}", what, pdev.as_ref().name()))
}

/// Requests the IRQ of `vector` for `handler`, hinting `cpu_index`-th CPU of the spread.
fn request_irq<'bound, T: irq::Handler + 'bound>(
    vectors: &pci::BoundIrqVectors<'bound>,
    vector: u32,
    name: CString,
    handler: T,
) -> Result<Pin<KBox<NamedRegistration<'bound, T>>>> {
    let request = vectors.request(vector)?;
    let cpu = kernel::cpu::local_spread(vector);
    // SAFETY: The registration is boxed, kept in the driver's bound data and dropped with it
    // (or on the probe error path); it is never forgotten.
    let init = unsafe {
        NamedRegistration::new(
            request,
            irq::Flags::TRIGGER_NONE,
            name,
            Some(cpu),
            Ok::<_, Error>(handler),
        )
    };
    KBox::try_pin_init(init, GFP_KERNEL)
}

impl ErdmaDriver {
    fn identify<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
    ) -> Result<(Bar0<'bound>, u32, Protocol, MacAddr)> {
        let bars = pdev.select_bars(pci::BarType::Memory);
        if bars != regs::MEMORY_BARS {
            dev_err!(
                pdev,
                "memory BARs are {bars:#x}, expected BAR0 and BAR2 ({:#x}) only\n",
                regs::MEMORY_BARS
            );
            return Err(EINVAL);
        }

        let bar = pdev.iomap_region_sized::<{ regs::REG_PAGE_SIZE }>(0, c"erdma_rs/bar0")?;

        let version = bar.read(regs::VERSION).version().get();
        if version == 0 {
            dev_err!(pdev, "VERSION reads 0: non-functional function\n");
            return Err(ENODEV);
        }

        let protocol: Protocol = bar.read(regs::DEV_PROTO).protocol().inspect_err(|_| {
            dev_err!(
                pdev,
                "unknown protocol {:#x} in DEV_PROTO\n",
                bar.read(regs::DEV_PROTO).into_raw()
            )
        })?;
        let mac = MacAddr::from_regs(bar.read(regs::NETDEV_MAC_L), bar.read(regs::NETDEV_MAC_H));
        Ok((bar, version, protocol, mac))
    }

    fn start<'bound>(pdev: &'bound pci::Device<Core<'_>>) -> Result<Running<'bound>> {
        let (bar, version, protocol, mac) = Self::identify(pdev)?;

        // The adapter is the RDMA side of a network device with the same permanent MAC; wait for
        // it before bringing anything up.
        let Some(ndev) = NetDevice::find_by_perm_addr(&mac.0) else {
            dev_info!(
                pdev,
                "waiting for the network device with MAC {mac} (deferring the probe)\n"
            );
            return Err(EPROBE_DEFER);
        };

        let max_vectors = (kernel::cpu::nr_cpu_ids() + 1).min(MAX_CEQS + 1);
        let vectors = pdev.alloc_msix_vectors_bound(1, max_vectors)?;

        let dev: &device::Device<Bound> = pdev.as_ref();
        let hw = Arc::pin_init(
            try_pin_init!(Hw {
                pdev,
                bar,
                cmdq <- Cmdq::new(dev)?,
                aeq <- new_spinlock_irq!(EqRing::new(dev, AEQ_DEPTH, regs::AEQ_DB)?),
                cqs <- new_spinlock_irq!(RBTree::new()),
                qps <- new_spinlock_irq!(RBTree::new()),
            }),
            GFP_KERNEL,
        )?;

        // Start from the power-on state, whatever a previous driver left.
        hw.reset();

        let common = request_irq(
            &vectors,
            0,
            irq_name(pdev, fmt!("common"))?,
            CommonIrq { hw: hw.clone() },
        )?;
        let mut running = Running {
            ib: None,
            hw: hw.clone(),
            ceqs: KVec::new(),
            common: Some(common),
        };

        hw.init()?;

        let nceqs = kernel::cpu::num_online_cpus()
            .min(vectors.len() - 1)
            .min(MAX_CEQS);
        for k in 0..nceqs {
            let eqn = k + 1;
            // CAST: `eqn` <= 31.
            let eqn16 = eqn as u16;
            let ring = Arc::pin_init(
                new_spinlock_irq!(EqRing::new(dev, CEQ_DEPTH, regs::eq_db(eqn16))?),
                GFP_KERNEL,
            )?;
            let (ring_addr, dbrec) = {
                let r = ring.lock();
                (r.dma_addr(), r.dbrec_addr())
            };
            let cmd = CreateEq {
                ring: ring_addr,
                // CAST: `eqn` <= 31.
                vector: eqn as u8,
                eqn: eqn as u8,
                depth_log2: CEQ_DEPTH.trailing_zeros() as u8,
                qtype: EQ_TYPE_CEQ,
                dbrec_lo: lower(dbrec),
                dbrec_hi: upper(dbrec),
                reserved: 0,
            };
            hw.exec(&cmd, Wait::Poll)?;
            running.ceqs.push(
                Ceq {
                    irq: None,
                    ring: ring.clone(),
                    eqn: eqn16,
                },
                GFP_KERNEL,
            )?;
            let irq = request_irq(
                &vectors,
                eqn,
                irq_name(pdev, fmt!("ceq{k}"))?,
                CeqIrq {
                    hw: hw.clone(),
                    ring,
                    eqn: eqn16,
                },
            )?;
            if let Some(ceq) = running.ceqs.last_mut() {
                ceq.irq = Some(irq);
            }
        }

        hw.cmdq.enable_interrupts(&hw.bar);

        let caps = DeviceCaps::from_response(hw.exec(&QueryDevice {}, Wait::Sleep)?);
        // CAST: the firmware version is the low half of the first response word.
        let fw = hw.exec(&QueryFwInfo {}, Wait::Sleep)?.0[0] as u32;
        if caps.extend_db {
            hw.exec(&ConfDevice::new(PAGE_SHIFT as u32), Wait::Sleep)?;
        }

        let ib = IbDevice::register(
            // CAST: at most 31 CEQs.
            IbData::new(hw.clone(), caps, fw, mac, protocol, nceqs as u32)?,
            &ndev,
            nceqs,
            &THIS_MODULE,
        )?;

        dev_info!(
            pdev,
            "eRDMA adapter version {version:#x}, protocol {protocol}, MAC {mac}\n"
        );
        dev_info!(
            pdev,
            "firmware {}.{}, {} CEQs on {} vectors, {} QPs, atomics {}\n",
            fw >> 16,
            fw & 0xffff,
            nceqs,
            vectors.len(),
            caps.max_qp(),
            if caps.atomic { "on" } else { "off" }
        );
        dev_info!(pdev, "registered RDMA device {}\n", ib.name());
        running.ib = Some(ib);

        Ok(running)
    }
}

impl pci::Driver for ErdmaDriver {
    type IdInfo = ();
    type Data<'bound> = Erdma<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;
    const DMA_MASK: Option<DmaMask> = Some(DmaMask::new::<64>());

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pin_init::pin_init_scope(move || {
            pdev.enable_device_mem()?;
            pdev.set_master();

            let running = Self::start(pdev).inspect_err(|_| pdev.disable_device())?;
            Ok(try_pin_init!(Erdma {
                running <- new_mutex!(Some(running)),
            }))
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        let running = this.running.lock().take();
        drop(running);
        pdev.disable_device();
    }
}

/// This module, which the RDMA core pins while user space has the device open.
const THIS_MODULE: kernel::ThisModule = <LocalModule as kernel::ModuleMetadata>::THIS_MODULE;

kernel::module_pci_driver! {
    type: ErdmaDriver,
    name: "erdma_rs",
    authors: ["The erdma-rs developers"],
    description: "Alibaba Elastic RDMA Adapter (eRDMA) driver, in Rust",
    license: "GPL v2",
}
