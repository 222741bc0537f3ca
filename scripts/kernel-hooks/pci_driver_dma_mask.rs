    /// The mask of DMA addresses the device can reach, for streaming and coherent DMA, or `None`
    /// to keep the bus default.
    ///
    /// It is set before [`Driver::probe`] runs, that is before any DMA allocation or mapping for
    /// the device can exist, which is what makes setting it safe.
    const DMA_MASK: Option<crate::dma::DmaMask> = None;

    /// The largest DMA segment the device takes in one piece, in bytes, or `None` to keep the
    /// bus default (64 KiB for PCI). Set before [`Driver::probe`] runs, as [`Driver::DMA_MASK`].
    const DMA_MAX_SEG_SIZE: Option<u32> = None;

