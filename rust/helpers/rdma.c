// SPDX-License-Identifier: GPL-2.0

#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/uverbs_ioctl.h>

#if IS_BUILTIN(CONFIG_INFINIBAND)

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

#endif
