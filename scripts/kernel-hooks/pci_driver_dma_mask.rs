    /// The mask of DMA addresses the device can reach, for streaming and coherent DMA, or `None`
    /// to keep the bus default.
    ///
    /// It is set before [`Driver::probe`] runs, that is before any DMA allocation or mapping for
    /// the device can exist, which is what makes setting it safe.
    const DMA_MASK: Option<crate::dma::DmaMask> = None;

