// SPDX-License-Identifier: GPL-2.0

//! The vfio-user side of one device: region and IRQ descriptions, and the `ServerBackend` that
//! forwards protocol messages to the model (the [`crate::state::DeviceState`] it works on).

use std::fs::File;
use std::io;
use std::mem::size_of;
use std::sync::Arc;

use erdma_model::regs::{BAR0_SIZE, BAR2_SIZE, MSIX_VECTORS};
use erdma_model::{pci, Io, IrqSink};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_BAR2_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, ServerBackend, ServerRegion};

use crate::state::{lock, SharedState};
use crate::timer::Timer;

/// The regions the device exposes: config space, BAR0 and BAR2; the others have size 0.
pub fn regions() -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let size = match index {
                VFIO_PCI_CONFIG_REGION_INDEX => pci::CONFIG_SPACE_SIZE as u64,
                VFIO_PCI_BAR0_REGION_INDEX => BAR0_SIZE,
                VFIO_PCI_BAR2_REGION_INDEX => BAR2_SIZE,
                _ => 0,
            };
            let flags = if size > 0 {
                // No MMAP flag: every access reaches the model.
                VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
            } else {
                0
            };
            ServerRegion {
                region_info: vfio_region_info {
                    argsz: size_of::<vfio_region_info>() as u32,
                    flags,
                    index,
                    cap_offset: 0,
                    size,
                    offset: 0,
                },
                sparse_areas: Vec::new(),
                mmap_fd: None,
            }
        })
        .collect()
}

/// The interrupt indexes: MSI-X with 32 eventfd vectors, and the error-reporting IRQ that PCIe
/// functions have (QEMU wires it for AER recovery; the model never raises it). INTx and MSI are
/// empty: the adapter is MSI-X only.
pub fn irqs() -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| {
            let count = match index {
                VFIO_PCI_MSIX_IRQ_INDEX => MSIX_VECTORS.into(),
                VFIO_PCI_ERR_IRQ_INDEX => 1,
                _ => 0,
            };
            IrqInfo {
                index,
                count,
                flags: if count > 0 { VFIO_IRQ_INFO_EVENTFD } else { 0 },
            }
        })
        .collect()
}

/// Forwards vfio-user messages of one connection to the device.
pub struct Backend {
    state: SharedState,
    timer: Arc<Timer>,
}

impl Backend {
    /// A backend for the device behind `state`, whose delayed work `timer` runs.
    pub fn new(state: SharedState, timer: Arc<Timer>) -> Self {
        Backend { state, timer }
    }
}

impl ServerBackend for Backend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        let mut st = lock(&self.state);
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => st.device.pci_config_read(offset, data),
            VFIO_PCI_BAR0_REGION_INDEX => st.device.bar0_read(offset, data),
            VFIO_PCI_BAR2_REGION_INDEX => st.device.bar2_read(offset, data),
            _ => {
                log::debug!("read of empty region {region} at {offset:#x}");
                data.fill(0);
            }
        }
        log::trace!("read  region {region} {offset:#x} -> {data:02x?}");
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        log::trace!("write region {region} {offset:#x} <- {data:02x?}");
        let mut delayed_work = false;
        {
            let st = &mut *lock(&self.state);
            match region {
                VFIO_PCI_CONFIG_REGION_INDEX => st.device.pci_config_write(offset, data),
                VFIO_PCI_BAR0_REGION_INDEX => {
                    let mut io = Io::new(&mut st.mem, &mut st.irqs);
                    st.device.bar0_write(offset, data, &mut io);
                    if st.device.take_exit_request() {
                        crate::signals::die_soon();
                    }
                    delayed_work = st.device.next_deadline().is_some();
                }
                VFIO_PCI_BAR2_REGION_INDEX => st.device.bar2_write(offset, data),
                _ => log::debug!("write to empty region {region} at {offset:#x} ignored"),
            }
        }
        // After the device lock is released (see `timer` for the lock order).
        if delayed_work {
            self.timer.kick();
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        let mut st = lock(&self.state);
        let Some(fd) = fd else {
            // ROMs and other non-shared regions come without an fd, which is harmless. It is a
            // problem when guest RAM itself is not shared: then nothing fd-backed precedes it.
            let msg = format!(
                "DMA_MAP {address:#x}+{size:#x} without an fd: the device cannot reach this memory"
            );
            if st.mem.is_empty() && !std::mem::replace(&mut st.warned_fdless_map, true) {
                log::warn!(
                    "{msg}; guest RAM must be shared with the model \
                     (-object memory-backend-memfd,share=on -machine memory-backend=...)"
                );
            } else {
                log::debug!("{msg}");
            }
            return Ok(());
        };
        let readable = flags.contains(DmaMapFlags::READ);
        let writable = flags.contains(DmaMapFlags::WRITE);
        match st.mem.map(address, size, &fd, offset, readable, writable) {
            Ok(()) => {
                log::debug!("DMA_MAP {address:#x}+{size:#x} at file offset {offset:#x}");
                Ok(())
            }
            Err(e) => {
                log::error!("DMA_MAP refused: {e}");
                Err(e)
            }
        }
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        if flags.contains(DmaUnmapFlags::GET_DIRTY_PAGE_INFO) {
            log::error!("DMA_UNMAP with dirty-page tracking is not supported");
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        if flags.contains(DmaUnmapFlags::UNMAP_ALL) {
            log::debug!("DMA_UNMAP all");
            st.mem.unmap_all();
            return Ok(());
        }
        match st.mem.unmap(address, size) {
            Ok(n) => {
                log::debug!("DMA_UNMAP {address:#x}+{size:#x}: {n} region(s)");
                Ok(())
            }
            Err(e) => {
                log::error!("{e}");
                Err(e)
            }
        }
    }

    fn reset(&mut self) -> io::Result<()> {
        log::info!("device reset by the client");
        let mut st = lock(&self.state);
        st.device.reset();
        st.irqs.cancel_pending();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        lock(&self.state)
            .irqs
            .set_irqs(index, flags, start, count, fds)
            .inspect_err(|e| log::error!("{e}"))
    }
}
