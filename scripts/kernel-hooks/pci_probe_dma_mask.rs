            if let Some(mask) = T::DMA_MASK {
                // SAFETY: No code of the driver has run for this device yet, so no DMA
                // allocation or mapping for it can be in flight.
                unsafe { crate::dma::Device::dma_set_mask_and_coherent(&**pdev, mask)? };
            }

