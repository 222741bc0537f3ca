// SPDX-License-Identifier: GPL-2.0

//! The state of one device that its threads share: the model and its connection to the VM. The
//! vfio-user thread ([`crate::backend`]), the timer thread ([`crate::timer`]) and the control
//! socket ([`crate::control`]) each lock it for one step at a time.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use erdma_model::{Device, DeviceConfig};

use crate::guest_mem::MappedMemory;
use crate::irqs::EventFdIrqs;

/// The process's resident memory from `/proc/self/status` (what `query memory` reports).
#[derive(Debug)]
pub struct ProcStatus;

impl ProcStatus {
    /// `(VmRSS, VmHWM)` in bytes from the text of a `/proc/<pid>/status` file.
    pub fn parse(status: &str) -> Option<(u64, u64)> {
        erdma_model::proc_status_memory(status)
    }
}

impl erdma_model::ProcessMemory for ProcStatus {
    fn resident(&self) -> Option<(u64, u64)> {
        Self::parse(&std::fs::read_to_string("/proc/self/status").ok()?)
    }
}

/// Everything one device owns: the model and its connection to the VM.
pub struct DeviceState {
    /// The device model.
    pub device: Device,
    /// Guest memory mapped by the current client.
    pub mem: MappedMemory,
    /// MSI-X eventfds of the current client.
    pub irqs: EventFdIrqs,
    /// A DMA_MAP without an fd has been warned about (once per client).
    pub(crate) warned_fdless_map: bool,
}

impl DeviceState {
    /// A device at power-on with no client.
    pub fn new(config: DeviceConfig) -> Self {
        let mut device = Device::new(config);
        device.set_process_memory(Arc::new(ProcStatus));
        DeviceState {
            device,
            mem: MappedMemory::new(),
            irqs: EventFdIrqs::new(),
            warned_fdless_map: false,
        }
    }

    /// Forgets the client (mappings, eventfds, pending interrupts) and returns the device and
    /// its control state (fault rules, ...) to power-on, with the start-up rules of the command
    /// line.
    pub fn disconnect(&mut self) {
        self.device.reset();
        self.device.reset_harness();
        self.mem.unmap_all();
        self.irqs.disconnect();
        self.warned_fdless_map = false;
    }
}

/// The device state shared between its server thread, its timer thread and the control socket.
pub type SharedState = Arc<Mutex<DeviceState>>;

/// Locks the device state. A panic while holding the lock is a model bug that the panic hook
/// reports; the state is still used rather than wedging the device.
pub fn lock(state: &Mutex<DeviceState>) -> MutexGuard<'_, DeviceState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_model::ProcessMemory;

    #[test]
    fn proc_status_gives_the_resident_memory() {
        let text = "Name:\terdma-emu\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(ProcStatus::parse(text), Some((1 << 20, 2 << 20)));
        assert_eq!(ProcStatus::parse("VmRSS: 1 kB\n"), None, "no VmHWM");
        let (rss, hwm) = ProcStatus.resident().expect("Linux has /proc/self/status");
        assert!(rss > 0 && hwm >= rss);
        let mut st = DeviceState::new(DeviceConfig::default());
        let st = &mut st;
        let mut io = erdma_model::Io::new(&mut st.mem, &mut st.irqs);
        let reply = st
            .device
            .control("query memory", &mut io)
            .expect("query memory");
        assert!(
            reply.starts_with("rss=") && !reply.contains("unknown"),
            "{reply}"
        );
    }
}
