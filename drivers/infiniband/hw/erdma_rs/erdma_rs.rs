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
//!
//! Comments cite the adapter's interface as `erdma_rs_hw N.M`: the sections of
//! `Documentation/infiniband/erdma_rs_hw.rst`, which describes it as this driver and the
//! device model implement it.
//!
//! # Locking
//!
//! One order for the whole driver, the iWARP connection manager included: a lock is never
//! taken while holding one listed after it.
//!
//! 1. `Adapter::running` (probe and unbind).
//! 2. The connection manager's, in process context only (its work and the iw_cm operations):
//!    a listener's socket (`Listener::sock`, held while it adopts accepted connections), then
//!    an endpoint's state (`Endpoint::inner`), which its work and the operations on it hold
//!    throughout.
//! 3. `Qp::shadow` (modify, query, destroy), held while the command runs; then an iWARP queue
//!    pair's connection state (`IwQp::conn`), held while its MODIFY_QP or REFLUSH runs; then a
//!    kernel QP's `Reflusher::live` (its REFLUSH work, and its destruction, which closes it),
//!    held while the REFLUSH runs. Post, poll and completion paths wait for no command: they
//!    queue work on the device's work queue (`IbData::work`).
//! 4. The connection manager's tables (`Cm::tables`, a mutex: lookups by token, never from an
//!    interrupt).
//! 5. The command queue's state (`Cmdq`), held only to post a command or reap completions;
//!    a sleeping waiter releases it. The vector-0 handler rings the command queue's arm
//!    doorbells after releasing it.
//! 6. An event queue's ring: the AEQ's (`Hw::aeq`), or one CEQ's, each taken only by its own
//!    interrupt handler. The command queue's EQ (`Cmdq::eq`) is a leaf: its handler takes
//!    it alone, never with the command queue's state.
//! 7. The object tables the handlers look objects up in (`Dispatch`): `Dispatch::qps` (the
//!    AEQ's) and one table of CQs per CEQ (`Dispatch::ceq_cqs`), so CEQs never contend with
//!    each other. The completion upcall runs under the CEQ's table lock and may poll or arm
//!    the CQ, or post (which at most queues work).
//! 8. A kernel CQ's state (`KernelCq`), which also holds the kernel QPs it completes for:
//!    `poll_cq` looks each CQE's QP up there, not in a table of the whole device.
//! 9. A kernel QP's send or receive queue (`KernelQp`), taken by posting and, under the CQ's
//!    state, by polling.
//!
//! Leaves, taken alone: the number ranges (`ObjIds`, the AHNs), the stranded memory of failed
//! teardowns (`Hw::strand`), and an iWARP queue pair's interrupt-side links (`IwQp::irq_ep`,
//! `IwQp::refs`, taken under `Dispatch::qps` by the AEQ handler). Memory the adapter reads
//! (rings, MTTs) is freed only with interrupts enabled, so entries removed from a table under
//! its lock are dropped after it.

use kernel::{
    device::{
        self,
        Bound,
        Core, //
    },
    device_id::IdArray,
    dma::DmaMask,
    driver,
    fmt,
    io::Io,
    irq::{
        self,
        IrqReturn,
        NamedRegistration, //
    },
    net::{
        device::NetDevice,
        namespace::PernetRegistration, //
    },
    new_mutex,
    new_spinlock_irq,
    page::PAGE_SHIFT,
    pci,
    prelude::*,
    str::CString,
    sync::{
        Arc,
        Mutex,
        SpinLockIrq, //
    },
    InPlaceModule,
    ModuleMetadata, //
};

mod ah;
mod cm;
mod cmdq;
mod commands;
mod consts;
mod cq;
mod dispatch;
mod eq;
mod formats;
mod health;
mod hw;
mod ibdev;
mod ids;
mod kverbs;
mod mr;
mod mtt;
mod object;
mod pd;
mod qp;
mod qpstate;
mod regs;
mod report;
mod ring;
mod sgsi;
mod verbs;

use commands::{
    ConfDevice,
    ConfDeviceCfg,
    CreateEq,
    DestroyEq,
    QueryDevice,
    QueryFwInfo, //
};
use consts::{
    EQ_TYPE_CEQ,
    MAX_CEQS, //
};
use eq::EqRing;
use formats::low32;
use hw::Hw;
use ibdev::IbData;
use kverbs::Objects;
use regs::{
    Bar0,
    MacAddr,
    Protocol, //
};
use ring::{
    lower,
    upper, //
};
use verbs::IbDevice;

/// PCI device ID of the eRDMA function.
const PCI_DEVICE_ID_ERDMA: u32 = 0x107f;

/// Depth of the asynchronous event queue.
const AEQ_DEPTH: u16 = 4096;
/// Depth of each completion event queue.
const CEQ_DEPTH: u16 = 4096;

/// Vector 0: command completions, then asynchronous events.
struct CommonIrq<'bound> {
    hw: Arc<Hw<'bound>>,
    objects: Arc<Objects>,
}

impl irq::Handler for CommonIrq<'_> {
    fn handle(&self) -> IrqReturn {
        self.hw.handle_common_irq(&*self.objects);
        IrqReturn::Handled
    }
}

/// A completion event queue's interrupt.
struct CeqIrq<'bound> {
    hw: Arc<Hw<'bound>>,
    objects: Arc<Objects>,
    ring: Arc<SpinLockIrq<EqRing>>,
    eqn: u16,
}

impl irq::Handler for CeqIrq<'_> {
    fn handle(&self) -> IrqReturn {
        self.hw.handle_ceq(&self.ring, self.eqn, &*self.objects);
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
/// the order the adapter needs (erdma_rs_hw 2.4): each CEQ's interrupt, then DESTROY_EQ, then its
/// ring; then a function reset; then the common interrupt. The rings of the AEQ and the command
/// queue go with the last reference to [`Hw`].
struct Running<'bound> {
    /// Looks at the adapter's health while it is registered; stopped first.
    watchdog: Option<Arc<health::Watchdog>>,
    /// The RDMA device, unregistered next.
    ib: Option<IbDevice<'bound>>,
    hw: Arc<Hw<'bound>>,
    ceqs: KVec<Ceq<'bound>>,
    common: Option<Pin<KBox<NamedRegistration<'bound, CommonIrq<'bound>>>>>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.watchdog.take() {
            health::Watchdog::stop(&w);
        }
        // Unregistering closes every user context and destroys every object, by command.
        self.ib = None;
        // With the command queue disabled, nothing can be destroyed by command: the reset
        // below stops the adapter's use of every ring.
        let destroy = !self.hw.cmdq.is_disabled();
        while let Some(Ceq { irq, ring, eqn }) = self.ceqs.pop() {
            // The interrupt first, then the adapter's use of the ring, then the ring.
            drop(irq);
            if !destroy {
                // Freed after the reset below.
                self.hw.strand(
                    fmt!("CEQ {eqn} kept until the reset: the command queue is disabled\n"),
                    ring,
                );
                continue;
            }
            let cmd = DestroyEq {
                reserved0: 0,
                // CAST: EQNs and vectors are below 32.
                vector: eqn as u8,
                eqn: eqn as u8,
                reserved1: 0,
                qtype: EQ_TYPE_CEQ,
                reserved2: 0,
            };
            // Vector 0 is still there: the command sleeps until its completion interrupt.
            match self.hw.exec(&cmd) {
                Ok(()) => drop(ring),
                Err(e) => self.hw.strand(
                    fmt!(
                        "DESTROY_EQ {eqn} failed ({}); its ring is kept until the reset\n",
                        e.to_errno()
                    ),
                    ring,
                ),
            }
        }
        self.hw.reset();
        self.common = None;
    }
}

/// What the driver keeps of a bound adapter.
#[pin_data]
struct Adapter<'bound> {
    /// Taken (and so torn down) at unbind, while the device is still enabled.
    #[pin]
    running: Mutex<Option<Running<'bound>>>,
}

struct ErdmaDriver;

/// The adapter's ID, which the in-tree C driver `erdma` claims too.
///
/// Not exported as a module alias (`pci_device_table!` would): the adapter's alias loads the C
/// driver unless the system chooses this one, by the modprobe configuration our package installs
/// (`alias pci:v00001DEDd0000107F* erdma_rs`). With both aliases, udev would load both modules and
/// whichever registered first would bind.
static PCI_TABLE: IdArray<pci::DeviceId, (), 1> = IdArray::new([(
    pci::DeviceId::from_id(pci::Vendor::ALIBABA, PCI_DEVICE_ID_ERDMA),
    &(),
)]);

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

        let bar: Bar0<'bound> = pdev.iomap_region_sized(0, c"erdma_rs/bar0")?;

        let version = bar.read(regs::VERSION).version().get();
        if version == u32::MAX {
            dev_err!(
                pdev,
                "VERSION reads all-ones: the function does not answer (gone, or its device \
                 model died)\n"
            );
            return Err(ENODEV);
        }
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
        let hw = Arc::pin_init(Hw::new(pdev, bar, AEQ_DEPTH)?, GFP_KERNEL)?;
        let objects = Arc::pin_init(Objects::new()?, GFP_KERNEL)?;

        // Start from the power-on state, whatever a previous driver left.
        hw.reset();

        let common = request_irq(
            &vectors,
            0,
            irq_name(pdev, fmt!("common"))?,
            CommonIrq {
                hw: hw.clone(),
                objects: objects.clone(),
            },
        )?;
        let mut running = Running {
            watchdog: None,
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
            // The command queue polls until its interrupt is on (below), sleeping between looks.
            hw.exec(&cmd)?;
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
                    objects: objects.clone(),
                    ring,
                    eqn: eqn16,
                },
            )?;
            if let Some(ceq) = running.ceqs.last_mut() {
                ceq.irq = Some(irq);
            }
        }

        hw.cmdq.enable_interrupts(&hw.bar);

        let caps = hw
            .exec(&QueryDevice {})?
            .checked(|c| {
                hw.reports.report(
                    hw.dev(),
                    fmt!(
                        "QUERY_DEVICE reported {} = {}, out of range: using {}\n",
                        c.field,
                        c.reported,
                        c.used
                    ),
                );
            })
            .inspect_err(|_| dev_err!(pdev, "QUERY_DEVICE reported no queue pairs\n"))?;
        // CAST: a 32-bit field.
        let fw = hw.exec(&QueryFwInfo {})?.version().get() as u32;
        if caps.extend_db {
            let cmd = ConfDevice {
                cfg: ConfDeviceCfg::zeroed()
                    .with_page_size_enable(true)
                    // CAST: PAGE_SHIFT is small.
                    .with_page_shift(low32(PAGE_SHIFT as u32)),
                reserved: [0; 5],
            };
            hw.exec(&cmd)?;
        }

        let ib = IbDevice::register(
            // CAST: at most 31 CEQs.
            IbData::new(hw.clone(), objects, caps, fw, mac, protocol, nceqs as u32)?,
            &ndev,
            nceqs,
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
        if let Some(period) = health::period_ms(module_parameters::health_check_ms.value()) {
            running.watchdog = Some(health::Watchdog::start(ib.device(), period)?);
        }
        running.ib = Some(ib);

        Ok(running)
    }
}

impl pci::Driver for ErdmaDriver {
    type IdInfo = ();
    type Data<'bound> = Adapter<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;
    const DMA_MASK: Option<DmaMask> = Some(DmaMask::new::<64>());
    // No limit of the adapter's on a DMA segment: with the bus default of 64 KiB, user memory
    // that is physically contiguous beyond it would be mapped in 64 KiB pieces, and a memory
    // region could not take larger MTT pages than that.
    const DMA_MAX_SEG_SIZE: Option<u32> = Some(u32::MAX);

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pin_init::pin_init_scope(move || {
            pdev.enable_device_mem()?;
            pdev.set_master();

            let running = Self::start(pdev).inspect_err(|_| pdev.disable_device())?;
            Ok(try_pin_init!(Adapter {
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

/// The devices of [`PCI_TABLE`] another driver holds, listed for a log line:
/// `0000:00:03.0 (erdma), 0000:00:04.0 (erdma)`.
struct HeldBy<'a>(&'a [pci::Holder]);

impl fmt::Display for HeldBy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self
            .0
            .iter()
            .filter_map(|h| Some((&h.device, h.driver.as_ref()?)));
        for (i, (device, driver)) in held.enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(
                f,
                "{sep}{} ({})",
                device.to_str().unwrap_or("?"),
                driver.to_str().unwrap_or("?")
            )?;
        }
        Ok(())
    }
}

/// Refuses to load when another driver holds every adapter: erdma_rs would drive none of them.
///
/// Says in one line which driver holds which adapter and how to hand one over. With some adapters
/// free, erdma_rs loads and drives those, and the same line says which it leaves alone.
fn check_holders() -> Result {
    let found = pci::holders(pci::Vendor::ALIBABA, PCI_DEVICE_ID_ERDMA)?;
    let held = found.iter().filter(|h| h.driver.is_some()).count();
    if held == 0 {
        return Ok(());
    }
    let holder = found
        .iter()
        .find_map(|h| h.driver.as_ref()?.to_str().ok())
        .unwrap_or("DRIVER");
    if held == found.len() {
        pr_err!(
            "every eRDMA adapter is held by another driver: {}; hand one over with \
             'echo ADDRESS > /sys/bus/pci/drivers/{holder}/unbind' and load erdma_rs again\n",
            HeldBy(&found)
        );
        return Err(EBUSY);
    }
    pr_info!(
        "leaving the eRDMA adapters another driver holds: {} (hand one over with \
         'echo ADDRESS > /sys/bus/pci/drivers/{holder}/unbind; \
         echo ADDRESS > /sys/bus/pci/drivers/erdma_rs/bind')\n",
        HeldBy(&found)
    );
    Ok(())
}

/// Refuses parameters out of their ranges.
fn check_params() -> Result {
    let base = module_parameters::reserve_ports_base.value();
    if base == 0 || base > u16::MAX - (cm::RESERVED_PORTS - 1) {
        pr_err!(
            "reserve_ports_base={base}: compat mode needs {} TCP ports from it, within 1 to 65535\n",
            cm::RESERVED_PORTS
        );
        return Err(EINVAL);
    }
    Ok(())
}

/// The module: the PCI driver, registered unless another driver holds every adapter, and in
/// compat mode the TCP ports its connections use, held in every network namespace.
#[pin_data]
struct ErdmaModule {
    #[pin]
    driver: driver::Registration<pci::Adapter<ErdmaDriver>>,
    /// Released after the driver (fields drop in this order).
    ports: Option<Pin<KBox<PernetRegistration<cm::ReservedPorts>>>>,
}

impl InPlaceModule for ErdmaModule {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pin_init::pin_init_scope(move || {
            check_params()?;
            check_holders()?;
            let ports = if module_parameters::compat_mode.value() {
                Some(KBox::pin_init(PernetRegistration::new(), GFP_KERNEL)?)
            } else {
                None
            };
            Ok(try_pin_init!(Self {
                ports,
                driver <- driver::Registration::new(<Self as ModuleMetadata>::NAME, module),
            }))
        })
    }
}

module! {
    type: ErdmaModule,
    name: "erdma_rs",
    authors: ["The erdma-rs developers"],
    description: "Alibaba Elastic RDMA Adapter (eRDMA) driver, in Rust",
    license: "GPL v2",
    params: {
        mpa_reply_timeout_ms: u32 {
            default: 10000,
            description: "iWARP: how long a connection waits for TCP, then for the peer's MPA reply, in ms (100 to 600000; the upstream driver's 10 s by default)",
        },
        health_check_ms: u32 {
            default: 1000,
            description: "How often the driver looks at each adapter's health, in ms (100 to 60000; 0: never): a failed adapter is reported to its consumers (IB_EVENT_DEVICE_FATAL), its kernel work flushed, and the function probed again",
        },
        compat_mode: bool {
            default: false,
            description: "iWARP adapters: compat mode (as Alibaba's out-of-tree driver's): a RoCEv2 device to applications, whose queue pairs are connected the RoCE way (ibv_modify_qp with the peer's GID and QPN: NCCL, perftest, ibv_rc_pingpong), on a TCP 4-tuple both ends compute from the addresses and QPNs",
        },
        reserve_ports_base: u16 {
            default: 30608,
            description: "compat mode: the first of the 16 TCP ports its connections use (0x7790 by default, as Alibaba's driver)",
        },
        mpa_request_timeout_ms: u32 {
            default: 20000,
            description: "iWARP: how long an accepted TCP connection has to send its MPA request, in ms (100 to 600000; the upstream driver's 20 s by default)",
        },
    },
}
