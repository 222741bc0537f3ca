// SPDX-License-Identifier: GPL-2.0

#include <rdma/ib_verbs.h>

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

#endif
