// SPDX-License-Identifier: GPL-2.0

#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/uverbs_ioctl.h>
#include <linux/dma-direct.h>
#include <linux/dma-map-ops.h>
#include <linux/highmem.h>
#include <linux/iommu.h>
#include <linux/iommu-dma.h>

#if IS_BUILTIN(CONFIG_INFINIBAND) || defined(ERDMA_RS_KERNEL_IN_MODULE)

__rust_helper u64
rust_helper_rdma_user_mmap_get_offset(const struct rdma_user_mmap_entry *entry)
{
	return rdma_user_mmap_get_offset(entry);
}

__rust_helper pgprot_t rust_helper_pgprot_device(pgprot_t prot)
{
	return pgprot_device(prot);
}

__rust_helper bool rust_helper_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

__rust_helper u16 rust_helper_rdma_get_udp_sport(u32 fl, u32 lqpn, u32 rqpn)
{
	return rdma_get_udp_sport(fl, lqpn, rqpn);
}

__rust_helper u16 rust_helper_rdma_flow_label_to_udp_sport(u32 fl)
{
	return rdma_flow_label_to_udp_sport(fl);
}

__rust_helper struct ib_ucontext *
rust_helper_rdma_udata_to_ucontext(struct ib_udata *udata)
{
	return udata ? rdma_udata_to_uverbs_attr_bundle(udata)->context : NULL;
}

#if IS_ENABLED(CONFIG_INFINIBAND_USER_MEM)
__rust_helper struct ib_umem *
rust_helper_ib_umem_get_va(struct ib_device *device, unsigned long addr,
			   size_t size, int access)
{
	return ib_umem_get_va(device, addr, size, access);
}
#endif

__rust_helper size_t rust_helper_ib_umem_num_dma_blocks(struct ib_umem *umem,
							unsigned long pgsz)
{
	return ib_umem_num_dma_blocks(umem, pgsz);
}

/*
 * Copies @len bytes between @buf and the memory at bus address @daddr, which a kernel consumer
 * mapped for @dev's DMA (into that memory if @to_mapping): for a driver that carries a queue
 * pair in software, whose data the device never touches. Each page's address is translated as
 * the mapping was made (the IOMMU's table, or the direct mapping, where a bounce buffer is what
 * the consumer's sync or unmap copies from and to). -EFAULT for an address that is no page of
 * memory, -EOPNOTSUPP for a device whose DMA goes through other operations.
 */
__rust_helper int rust_helper_ib_copy_dma_mapped(struct device *dev, u64 daddr, void *buf,
						 size_t len, bool to_mapping)
{
	while (len) {
		size_t chunk = min_t(size_t, len, PAGE_SIZE - offset_in_page(daddr));
		phys_addr_t phys;
		void *va;

		if (use_dma_iommu(dev)) {
			struct iommu_domain *domain = iommu_get_domain_for_dev(dev);

			phys = domain ? iommu_iova_to_phys(domain, daddr) : 0;
			if (!phys)
				return -EFAULT;
		} else if (get_dma_ops(dev)) {
			return -EOPNOTSUPP;
		} else {
			phys = dma_to_phys(dev, daddr);
		}
		if (!pfn_valid(PHYS_PFN(phys)))
			return -EFAULT;
		va = kmap_local_page(pfn_to_page(PHYS_PFN(phys)));
		if (to_mapping)
			memcpy(va + offset_in_page(phys), buf, chunk);
		else
			memcpy(buf, va + offset_in_page(phys), chunk);
		kunmap_local(va);
		daddr += chunk;
		buf += chunk;
		len -= chunk;
	}
	return 0;
}

#endif
