// SPDX-License-Identifier: GPL-2.0

//! Protection domains: numbers the driver hands out and passes in CREATE_QP and REG_MR; the
//! adapter has no command for them (erdma_rs_hw 6).

use kernel::prelude::*;

use crate::{
    ibdev::IbData,
    ids::{
        IdKind,
        ObjIds, //
    },
};

/// A protection domain: its number.
pub(crate) struct Pd {
    pub(crate) pdn: u32,
}

impl Pd {
    /// Takes a free PDN.
    pub(crate) fn alloc(data: &IbData<'_>) -> Result<Self> {
        let pdn = ObjIds::take(&data.ids, IdKind::Pd)?.keep();
        Ok(Self { pdn })
    }

    /// Gives the PDN back.
    pub(crate) fn dealloc(&self, data: &IbData<'_>) {
        ObjIds::free(&data.ids, IdKind::Pd, self.pdn);
    }
}
