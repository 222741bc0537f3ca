// SPDX-License-Identifier: GPL-2.0

//! Protection domains: numbers the driver hands out and passes in CREATE_QP and REG_MR; the
//! adapter has no command for them (erdma-hw 6).

use kernel::prelude::*;

use crate::ibdev::IbData;

/// A protection domain: its number.
pub(crate) struct Pd {
    pub(crate) pdn: u32,
}

impl Pd {
    /// Takes a free PDN.
    pub(crate) fn alloc(data: &IbData<'_>) -> Result<Self> {
        let pdn = data.ids.lock().pd.alloc()?;
        Ok(Self { pdn })
    }

    /// Gives the PDN back.
    pub(crate) fn dealloc(&self, data: &IbData<'_>) {
        data.ids.lock().pd.free(self.pdn);
    }
}
