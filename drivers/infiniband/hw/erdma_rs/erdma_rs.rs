// SPDX-License-Identifier: GPL-2.0

//! Rust driver for Alibaba's Elastic RDMA Adapter (eRDMA).
//!
//! The adapter is a PCI function (1ded:107f) with two memory BARs: BAR0 holds a page of registers
//! followed by the doorbell spaces, BAR2 holds the MSI-X table. It is paired with a virtio-net
//! function that carries the same MAC address.

use kernel::{
    device::Core,
    io::Io,
    pci,
    prelude::*, //
};

mod regs;

use regs::{
    MacAddr,
    Protocol, //
};

/// PCI device ID of the eRDMA function.
const PCI_DEVICE_ID_ERDMA: u32 = 0x107f;

/// BAR0, mapped whole; accesses inside the register page are checked at compile time.
type Bar0<'bound> = pci::Bar<'bound, { regs::REG_PAGE_SIZE }>;

/// What the driver knows about a bound adapter.
struct Erdma<'bound> {
    bar: Bar0<'bound>,
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

impl Erdma<'_> {
    /// Returns the function to its power-on state. The adapter does not signal completion to
    /// the driver (`DEV_STATUS.reset_done` is informational).
    fn reset(bar: &Bar0<'_>) {
        bar.write_reg(regs::DEV_CTRL::zeroed().with_reset(true));
    }
}

impl pci::Driver for ErdmaDriver {
    type IdInfo = ();
    type Data<'bound> = Erdma<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pdev.enable_device_mem()?;
        pdev.set_master();

        let probe_bound = || -> Result<Erdma<'bound>> {
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
            let mac =
                MacAddr::from_regs(bar.read(regs::NETDEV_MAC_L), bar.read(regs::NETDEV_MAC_H));

            Erdma::reset(&bar);

            dev_info!(
                pdev,
                "eRDMA adapter version {version:#x}, protocol {protocol}, MAC {mac}\n"
            );
            Ok(Erdma { bar })
        };

        probe_bound().inspect_err(|_| pdev.disable_device())
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        Erdma::reset(&this.bar);
        pdev.disable_device();
    }
}

kernel::module_pci_driver! {
    type: ErdmaDriver,
    name: "erdma_rs",
    authors: ["The erdma-rs developers"],
    description: "Alibaba Elastic RDMA Adapter (eRDMA) driver, in Rust",
    license: "GPL v2",
}
