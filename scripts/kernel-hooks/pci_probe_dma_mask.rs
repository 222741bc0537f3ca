            if let Some(mask) = T::DMA_MASK {
                // SAFETY: No code of the driver has run for this device yet, so no DMA
                // allocation or mapping for it can be in flight.
                unsafe { crate::dma::Device::dma_set_mask_and_coherent(&**pdev, mask)? };
            }
            if let Some(size) = T::DMA_MAX_SEG_SIZE {
                // SAFETY: As above: nothing of the driver's can be allocating or mapping yet.
                unsafe { crate::dma::Device::dma_set_max_seg_size(&**pdev, size) };
            }

