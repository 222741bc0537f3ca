# SPDX-License-Identifier: GPL-2.0
# The few edits to existing kernel files that an overlay cannot express.
# Sourced by build-kernel.sh.  Each hooked file is rebuilt from its pristine
# copy (saved on first use) plus the edits below, and written back only when
# the result differs, so an unchanged hook never triggers a rebuild and a
# removed hook restores the original file.

# hook FILE EDIT-FUNCTION: apply EDIT-FUNCTION (which edits "$1" in place)
# to a copy of the pristine FILE, and install the result if it changed.
hooked=()
hook() {
	local f=$1 edit=$2 pristine=$KERNEL_DIR/pristine/$1 tmp
	hooked+=("$f")
	if [ ! -f "$pristine" ]; then
		mkdir -p "$(dirname "$pristine")"
		cp "$KSRC/$f" "$pristine"
	fi
	tmp=$(mktemp)
	cp "$pristine" "$tmp"
	"$edit" "$tmp"
	if ! cmp -s "$tmp" "$KSRC/$f"; then
		cp "$tmp" "$KSRC/$f"
		say "hook: updated $f"
	fi
	rm -f "$tmp"
}

# insert_after FILE ANCHOR-REGEX LINE: insert LINE after the first line
# matching ANCHOR-REGEX; fails loudly if the anchor is not there.
insert_after() {
	grep -qE "$2" "$1" || die "hook anchor '$2' not found in $1 (kernel source changed?)"
	awk -v re="$2" -v line="$3" '{ print } !done && $0 ~ re { print line; done = 1 }' "$1" >"$1.new"
	mv "$1.new" "$1"
}

# insert_before FILE ANCHOR-REGEX LINE: insert LINE before the first line
# matching ANCHOR-REGEX.
insert_before() {
	grep -qE "$2" "$1" || die "hook anchor '$2' not found in $1 (kernel source changed?)"
	awk -v re="$2" -v line="$3" '!done && $0 ~ re { print line; done = 1 } { print }' "$1" >"$1.new"
	mv "$1.new" "$1"
}

# insert_file_before FILE ANCHOR-REGEX SNIPPET-FILE: insert the snippet's lines
# before the first line matching ANCHOR-REGEX.
insert_file_before() {
	grep -qE "$2" "$1" || die "hook anchor '$2' not found in $1 (kernel source changed?)"
	awk -v re="$2" -v snip="$3" '
		!done && $0 ~ re { while ((getline l < snip) > 0) print l; done = 1 }
		{ print }' "$1" >"$1.new"
	mv "$1.new" "$1"
}

# The project's menu (the top-level Kconfig, comments left out) right after
# the upstream erdma driver's entry.
edit_ib_kconfig() {
	local snip
	snip=$(mktemp)
	grep -v '^#' "$TOP/Kconfig" | sed '/./,$!d' >"$snip"
	grep -q '^source "drivers/infiniband/hw/erdma_rs/Kconfig"$' "$snip" ||
		die "the top-level Kconfig does not source drivers/infiniband/hw/erdma_rs/Kconfig"
	insert_file_before "$1" '^source "drivers/infiniband/hw/hfi1/Kconfig"' "$snip"
	rm -f "$snip"
}

edit_ib_hw_makefile() {
	insert_after "$1" 'CONFIG_INFINIBAND_ERDMA\)' \
		'obj-$(CONFIG_INFINIBAND_ERDMA_RS)	+= erdma_rs/'
}


# rust/kernel/pci/resource.rs (BAR types, disable), vectors.rs (MSI-X vectors
# managed for the binding) and holder.rs (which drivers hold the devices of an
# ID) are submodules of kernel::pci; pci::Driver gains DMA_MASK.
edit_rust_pci() {
	insert_before "$1" '^mod id;$' 'mod holder;'
	insert_after "$1" '^mod irq;$' 'mod resource;\nmod vectors;\npub use self::holder::{holders, Holder};\npub use self::resource::BarType;\npub use self::vectors::BoundIrqVectors;'
	# pci::Driver::DMA_MASK, applied by the adapter before probe: the only point where the
	# "no concurrent DMA allocation" contract of dma_set_mask_and_coherent holds by construction.
	insert_file_before "$1" '^    /// PCI driver probe\.$' "$TOP/scripts/kernel-hooks/pci_driver_dma_mask.rs"
	insert_file_before "$1" '^            let data = T::probe\(pdev, info\);$' \
		"$TOP/scripts/kernel-hooks/pci_probe_dma_mask.rs"
}

# rust/kernel/irq/named.rs (IRQ registrations with an owned name) in kernel::irq.
edit_rust_irq() {
	insert_after "$1" '^mod request;$' '\nmod named;'
	insert_after "$1" '^pub use flags::Flags;$' '\npub use named::NamedRegistration;'
}

# rust/kernel/cpu/online.rs (num_online_cpus, local_spread) in kernel::cpu.
edit_rust_cpu() {
	insert_after "$1" '^use crate::\{bindings, device::Device' '\nmod online;\npub use online::{local_spread, num_online_cpus};'
}
# replace_line FILE OLD NEW: replace the first line that is exactly OLD by
# NEW; fails loudly if there is none.
replace_line() {
	grep -qxF -- "$2" "$1" || die "hook line '$2' not found in $1 (kernel source changed?)"
	awk -v old="$2" -v new="$3" '!done && $0 == old { print new; done = 1; next } { print }' "$1" >"$1.new"
	mv "$1.new" "$1"
}

# Module parameters shown in sysfs, read-only (kernel::module_param_show):
# the get operation of every parameter type, and the permissions 0444 in
# the module! macro (upstream gives 0: not in sysfs).
edit_rust_module_param() {
	replace_line "$1" '            get: None,' '            get: Some($crate::module_param_show::show_param::<$ty>),'
}
edit_rust_macros_module() {
	replace_line "$1" '                                perm: 0, // Will not appear in sysfs' \
		'                                perm: 0o444, // Read-only in sysfs (kernel::module_param_show)'
}

# CondVar::wait_timeout: the uninterruptible timed wait (condvar.rs has only the
# interruptible one).
edit_rust_condvar() {
	insert_file_before "$1" '^    /// Calls the kernel function to notify the appropriate number of threads\.' \
		"$TOP/scripts/kernel-hooks/condvar_wait_timeout.rs"
}

# The RDMA core, its user-verbs glue and the networking calls the rdma and net
# abstractions use, for bindgen.
edit_bindings_helper() {
	insert_after "$1" '^#include <net/netlink.h>$' \
		'#include <linux/netdevice.h>\n#include <linux/tcp.h>\n#include <net/ip.h>\n#include <net/sock.h>\n#include <net/udp.h>\n#include <rdma/ib_verbs.h>\n#include <rdma/ib_umem.h>\n#include <rdma/iter.h>\n#include <rdma/ib_cache.h>\n#include <rdma/uverbs_ioctl.h>\n#include <rdma/iw_cm.h>'
}

# C helpers for inline functions and macros of the RDMA core and of net devices.
edit_rust_helpers() {
	insert_after "$1" '^#include "pwm.c"$' '#include "rdma.c"'
	insert_after "$1" '^#include "net/genetlink.c"$' '#include "net/netdevice.c"\n#include "net/sock.c"'
}

# kernel::rdma, kernel::capability, kernel::module_param_show,
# kernel::net::device, kernel::net::namespace, kernel::net::tcp, kernel::net::udp.
edit_rust_lib() {
	insert_after "$1" '^pub mod rbtree;$' '#[cfg(any(CONFIG_INFINIBAND = "y", erdma_rs_kernel_in_module))]\npub mod rdma;'
	insert_after "$1" '^pub mod build_assert;$' 'pub mod capability;'
	insert_before "$1" '^pub mod rbtree;$' 'pub mod ratelimit;'
	insert_after "$1" '^pub mod module_param;$' 'pub mod module_param_show;'
}

edit_rust_net() {
	insert_before "$1" '^pub mod netlink;$' 'pub mod device;\npub mod namespace;'
	insert_after "$1" '^pub mod netlink;$' '#[cfg(CONFIG_INET)]\nmod sock;\n#[cfg(CONFIG_INET)]\npub mod tcp;\n#[cfg(CONFIG_INET)]\npub mod udp;'
}

# rust/kernel/workqueue/owned.rs (work queues a driver allocates) in kernel::workqueue.
edit_rust_workqueue() {
	insert_before "$1" '^/// A kernel work queue\.$' 'mod owned;\npub use owned::{cancel_delayed_sync, OwnedQueue};\n'
}

# The headers package (make bindeb-pkg) also carries what an out-of-tree Rust
# module build needs: the kernel crates' metadata and the procedural macros
# (rust/*.rmeta, rust/*.so; scripts/target.json already comes with scripts/).
# And it leaves out the transient files of a header rule that ran beside its
# copy: bindeb-pkg builds the packages side by side under a parallel make, and
# linux-libc-dev's headers_install runs the rules of
# arch/x86/include/generated/uapi, whose filechk writes a .tmp_*.h and removes
# it even when nothing changed (make check's second package build once had a
# .tmp_termbits.h the first had not).
edit_install_extmod_build() {
	insert_after "$1" '^	echo include/generated$' '	if is_enabled CONFIG_RUST; then
		find rust -maxdepth 1 \\( -name "*.rmeta" -o -name "*.so" \\)
	fi'
	insert_after "$1" ' -delete$' "find \"\${destdir}\" -name '.tmp_*' -delete"
}

# The packages' changelog is dated by the build's timestamp (SOURCE_DATE_EPOCH,
# which scripts/package.sh sets from the tree), not the time of the build.
edit_mkdebian() {
	grep -q ' -- \$maintainer  \$(date -R)$' "$1" || die "hook anchor 'date -R' not found in $1 (kernel source changed?)"
	sed -i 's/ -- \$maintainer  \$(date -R)$/ -- $maintainer  $(date -R ${SOURCE_DATE_EPOCH:+-d @$SOURCE_DATE_EPOCH})/' "$1"
}

apply_kernel_hooks() {
	hook drivers/infiniband/Kconfig edit_ib_kconfig
	hook drivers/infiniband/hw/Makefile edit_ib_hw_makefile
	hook rust/kernel/pci.rs edit_rust_pci
	hook rust/kernel/irq.rs edit_rust_irq
	hook rust/kernel/cpu.rs edit_rust_cpu
	hook rust/kernel/sync/condvar.rs edit_rust_condvar
	hook rust/bindings/bindings_helper.h edit_bindings_helper
	hook rust/helpers/helpers.c edit_rust_helpers
	hook rust/kernel/lib.rs edit_rust_lib
	hook rust/kernel/module_param.rs edit_rust_module_param
	hook rust/macros/module.rs edit_rust_macros_module
	hook rust/kernel/net/mod.rs edit_rust_net
	hook rust/kernel/workqueue.rs edit_rust_workqueue
	hook scripts/package/install-extmod-build edit_install_extmod_build
	hook scripts/package/mkdebian edit_mkdebian
	restore_unhooked
}

# restore_unhooked: a file hooked by an earlier build but not by this one gets
# its pristine copy back.
restore_unhooked() {
	local f
	[ -d "$KERNEL_DIR/pristine" ] || return 0
	while read -r f; do
		printf '%s\n' "${hooked[@]}" | grep -qxF "$f" && continue
		if ! cmp -s "$KERNEL_DIR/pristine/$f" "$KSRC/$f"; then
			cp "$KERNEL_DIR/pristine/$f" "$KSRC/$f"
			say "hook: restored $f (no longer hooked)"
		fi
	done < <(cd "$KERNEL_DIR/pristine" && find . -type f | sed 's|^\./||')
}
