# SPDX-License-Identifier: GPL-2.0
# Pinned versions of everything the build and the tests fetch.
# Changing a pin changes the cache keys that depend on it.

# Linux source: Debian's linux-source-7.3 from trixie-backports.
KERNEL_PKG=linux-source-7.3
KERNEL_PKG_VERSION=7.3.4-1~bpo13+1

# bindgen-cli from crates.io, and the libclang it loads (bookworm).
BINDGEN_VERSION=0.72.1
LLVM_MAJOR=19

# cargo-fuzz from crates.io for make fuzz (scripts/fuzz.sh), run on the nightly toolchain.
CARGO_FUZZ_VERSION=0.13.2

# QEMU with vfio-user-pci: qemu-system-x86 from trixie-backports, any 11.1.x.
QEMU_SERIES=11.1

# Guest userland: Debian trixie, with rdma-core of this upstream version.
GUEST_SUITE=trixie
RDMA_CORE_SERIES=56.1
GUEST_PACKAGES="rdma-core,ibverbs-utils,ibverbs-providers,rdmacm-utils,perftest,python3-pyverbs,iproute2,kmod,busybox,pciutils,nvme-cli,fio,nfs-kernel-server,nfs-common,bsdextrautils"

# The rehearsal's instance (make check, scripts/build-ecs-image.sh): a trixie
# system as an ECS instance runs it, with the distribution's rdma-core, the
# instance's own tools (nftables; nvme-cli and fio for NVMe over RDMA), and
# what an out-of-tree module build needs; its kernel is Debian's cloud kernel
# of trixie-backports, linux-image-$DEBIAN_KERNEL (below), installed from
# Debian's package.
ECS_PACKAGES="systemd-sysv,udev,dbus,initramfs-tools,zstd,e2fsprogs,kmod,iproute2,procps,nftables,nvme-cli,fio,rdma-core,ibverbs-utils,ibverbs-providers,rdmacm-utils,make,clang-$LLVM_MAJOR,lld-$LLVM_MAJOR,llvm-$LLVM_MAJOR,libelf1t64,libc6-dev"

# cmtime of a newer rdma-core, for iWARP (the guest's 56.1 cannot run there:
# its out-of-band socket takes the port of its rdma_cm listener, which an
# iWARP listener holds as a TCP port). Built on the host from the upstream
# source as Ubuntu 26.04 LTS ships it (a pool that keeps it for the life of
# that release), checked against this digest.
CMTIME_RDMA_CORE=61.0
CMTIME_URL=http://archive.ubuntu.com/ubuntu/pool/main/r/rdma-core/rdma-core_$CMTIME_RDMA_CORE.orig.tar.gz
CMTIME_SHA256=340be509137103677ea30798d6ffe64a991148dae333b79a5bc0744e219fde2f

# Host packages (Debian 12), installed with apt-get; none upgrades the base system.
HOST_PACKAGES="flex bison bc cpio kmod libelf-dev libssl-dev dwarves rsync debootstrap libclang-$LLVM_MAJOR-dev clang-$LLVM_MAJOR lld-$LLVM_MAJOR llvm-$LLVM_MAJOR xz-utils make gcc libibverbs-dev librdmacm-dev debhelper libdw-dev"

# Debian's own kernel (issue 32): erdma_rs built as a module package for an
# unmodified linux-image of trixie-backports, in a trixie build root with the
# compilers Debian built that kernel with (its CONFIG_RUSTC_VERSION_TEXT and
# CONFIG_CC_VERSION_TEXT): rustc, rust-src and libstd-rust-dev of trixie,
# gcc-14, and trixie's bindgen and libclang.
# The flavours make package builds for (the cloud kernel, which the
# rehearsal's instance runs, first); DEBIAN_KERNEL=K builds for K alone.
DEBIAN_KERNELS=${DEBIAN_KERNELS:-${DEBIAN_KERNEL:-7.3.4+deb13-cloud-amd64 7.3.4+deb13-amd64}}
DEBIAN_KERNEL=${DEBIAN_KERNEL:-7.3.4+deb13-cloud-amd64}
DEBIAN_KERNEL_VERSION=${DEBIAN_KERNEL_VERSION:-7.3.4-1~bpo13+1}
DEBIAN_RUSTC_VERSION=1.85.1+dfsg1-1+deb13u1
DEBIAN_BUILDROOT_PACKAGES="make,gcc-14,libc6-dev,bc,bison,flex,libelf-dev,libssl-dev,kmod,cpio,xz-utils,python3,bindgen,libclang-19-dev,dwarves,rsync,ca-certificates"
