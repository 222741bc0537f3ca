// SPDX-License-Identifier: GPL-2.0

//! Log set-up: every line goes to stderr as `NAME: [SECONDS] LEVEL message`, where NAME is the
//! device (`dev0`, ...) whose thread logs, or `erdma-emu`.

use std::cell::RefCell;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

thread_local! {
    static DEVICE_NAME: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// Makes log lines of the calling thread carry `name`.
pub fn set_device_name(name: &str) {
    DEVICE_NAME.with(|n| *n.borrow_mut() = Some(name.into()));
}

/// Installs the logger. `level` is a `--log-level` value; without it `RUST_LOG` is used if set,
/// otherwise `info`. Does nothing if a logger is already installed.
pub fn init(level: Option<&str>) {
    let mut builder = env_logger::Builder::new();
    match (level, std::env::var("RUST_LOG")) {
        (Some(level), _) => builder.parse_filters(level),
        (None, Ok(filters)) => builder.parse_filters(&filters),
        (None, Err(_)) => builder.filter_level(log::LevelFilter::Info),
    };
    let start = Instant::now();
    builder
        .target(env_logger::Target::Stderr)
        .format(move |buf, record| {
            let t = start.elapsed();
            let name = DEVICE_NAME.with(|n| n.borrow().clone());
            let name = name.as_deref().unwrap_or("erdma-emu");
            write!(
                buf,
                "{name}: [{:5}.{:06}] {:<5} ",
                t.as_secs(),
                t.subsec_micros(),
                record.level()
            )?;
            let target = record.target();
            if !target.starts_with("erdma") {
                write!(buf, "{target}: ")?;
            }
            writeln!(buf, "{}", record.args())
        });
    let _ = builder.try_init();
}
