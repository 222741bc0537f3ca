// SPDX-License-Identifier: GPL-2.0
//! `erdma-testpage`: the model's test page (`test_page=on`, README "Test page") from a guest.
//!
//! ```text
//! erdma-testpage BDF COMMAND...   run COMMAND, print the reply; exit 0 if the model
//!                                 accepted it, 1 if it refused it
//! erdma-testpage --probe BDF      exit 0 if function BDF has the test page
//! ```
//!
//! Exit status 2: usage, or the page could not be reached (no such function, no
//! `/dev/mem`, no test page). One process per command: the guest tests used to
//! drive the mailbox with one `devmem` process per 32-bit word, about 150
//! processes per command, which the debug kernel under TCG makes cost seconds.

use erdma_model::regs::{test_page, TEST_PAGE_BASE, TEST_PAGE_SIZE};
use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::process::ExitCode;

/// The mapping's length: the test page, as the model lays out BAR0.
const PAGE: usize = TEST_PAGE_SIZE as usize;

/// The test page of one PCI function, mapped through `/dev/mem`.
struct TestPage {
    base: *mut u8,
}

impl TestPage {
    /// Maps the test page of function `bdf` (e.g. `0000:00:06.0`).
    fn open(bdf: &str) -> Result<Self, String> {
        let path = format!("/sys/bus/pci/devices/{bdf}/resource");
        let text = fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let first = text.split_whitespace().next().unwrap_or("");
        let bar0 = u64::from_str_radix(first.trim_start_matches("0x"), 16)
            .map_err(|_| format!("{path}: no BAR0 address in '{first}'"))?;
        if bar0 == 0 {
            return Err(format!("{bdf}: BAR0 is not assigned"));
        }
        let mem = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_SYNC)
            .open("/dev/mem")
            .map_err(|e| format!("/dev/mem: {e}"))?;
        let offset = libc::off_t::try_from(bar0 + TEST_PAGE_BASE)
            .map_err(|_| format!("{bdf}: BAR0 address {bar0:#x} out of range"))?;
        // SAFETY: a fresh shared mapping of one page of /dev/mem; the kernel checks the range.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                mem.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "{bdf}: mmap of the test page: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self { base: p.cast() })
    }

    fn read(&self, off: u64) -> u32 {
        assert!(off as usize + 4 <= PAGE && off % 4 == 0);
        // SAFETY: `off` is an aligned word inside the mapped page.
        unsafe { self.base.add(off as usize).cast::<u32>().read_volatile() }
    }

    fn write(&self, off: u64, value: u32) {
        assert!(off as usize + 4 <= PAGE && off % 4 == 0);
        // SAFETY: `off` is an aligned word inside the mapped page.
        unsafe {
            self.base
                .add(off as usize)
                .cast::<u32>()
                .write_volatile(value)
        }
    }

    fn present(&self) -> bool {
        self.read(test_page::MAGIC) == test_page::MAGIC_VALUE
    }

    /// Runs `command`; returns whether the model accepted it, and its reply.
    fn run(&self, command: &str) -> Result<(bool, String), String> {
        let mut bytes = command.as_bytes().to_vec();
        bytes.push(0);
        if bytes.len() as u64 > test_page::BUF_SIZE {
            return Err(format!(
                "the command is {} bytes; the mailbox holds {} with its NUL",
                command.len(),
                test_page::BUF_SIZE
            ));
        }
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        for (i, w) in bytes.chunks_exact(4).enumerate() {
            let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            self.write(test_page::MAILBOX + 4 * i as u64, word);
        }
        self.write(test_page::EXECUTE, 1);
        let ok = self.read(test_page::STATUS) == 0;
        let mut reply = Vec::new();
        'words: for off in (0..test_page::BUF_SIZE).step_by(4) {
            for b in self.read(test_page::REPLY + off).to_le_bytes() {
                if b == 0 {
                    break 'words;
                }
                reply.push(b);
            }
        }
        Ok((ok, String::from_utf8_lossy(&reply).into_owned()))
    }
}

impl Drop for TestPage {
    fn drop(&mut self) {
        // SAFETY: `base` is the page `open` mapped; nothing uses it afterwards.
        unsafe { libc::munmap(self.base.cast(), PAGE) };
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: erdma-testpage BDF COMMAND... | erdma-testpage --probe BDF");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (probe, bdf, command) = match args.as_slice() {
        [flag, bdf] if flag == "--probe" => (true, bdf, String::new()),
        [bdf, rest @ ..] if !rest.is_empty() && !bdf.starts_with('-') => {
            (false, bdf, rest.join(" "))
        }
        _ => return usage(),
    };
    let page = match TestPage::open(bdf) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("erdma-testpage: {e}");
            return ExitCode::from(2);
        }
    };
    if !page.present() {
        if !probe {
            eprintln!("erdma-testpage: {bdf} has no test page (the model's test_page=on)");
        }
        return ExitCode::from(2);
    }
    if probe {
        return ExitCode::SUCCESS;
    }
    match page.run(&command) {
        Ok((ok, reply)) => {
            println!("{reply}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("erdma-testpage: {e}");
            ExitCode::from(2)
        }
    }
}
