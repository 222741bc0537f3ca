// SPDX-License-Identifier: GPL-2.0

#include <linux/netdevice.h>
#include <linux/tcp.h>
#include <net/netns/generic.h>
#include <net/sock.h>
#include <net/udp.h>

/*
 * Bottom halves off, also where softirq already has them off: a state change or data-ready
 * callback runs in softirq under the socket's spinlock, and in process context (the backlog
 * a socket-lock owner processes in release_sock) with them on.
 */
__rust_helper void rust_helper_read_lock_bh_sk_callback(struct sock *sk)
{
	read_lock_bh(&sk->sk_callback_lock);
}

__rust_helper void rust_helper_read_unlock_bh_sk_callback(struct sock *sk)
{
	read_unlock_bh(&sk->sk_callback_lock);
}

__rust_helper void rust_helper_write_lock_bh_sk_callback(struct sock *sk)
{
	write_lock_bh(&sk->sk_callback_lock);
}

__rust_helper void rust_helper_write_unlock_bh_sk_callback(struct sock *sk)
{
	write_unlock_bh(&sk->sk_callback_lock);
}

/* The caller holds sk->sk_callback_lock. */
__rust_helper void *rust_helper_locked_read_sk_user_data(const struct sock *sk)
{
	return __locked_read_sk_user_data_with_flags(sk, 0);
}

/* The caller holds sk->sk_callback_lock for writing; @ptr is not copied to accepted children. */
__rust_helper void rust_helper_assign_sk_user_data_nocopy(struct sock *sk, void *ptr)
{
	__rcu_assign_sk_user_data_with_flags(sk, ptr, ptr ? SK_USER_DATA_NOCOPY : 0);
}

__rust_helper int rust_helper_sock_error(struct sock *sk)
{
	return sock_error(sk);
}

__rust_helper void rust_helper_lock_sock(struct sock *sk)
{
	lock_sock(sk);
}

/*
 * The next sequence numbers of both directions of a TCP socket, read in C: bindgen does not
 * keep the cache-line alignment of struct tcp_sock's field groups, so its Rust layout is not
 * the kernel's. The caller holds the socket lock.
 */
__rust_helper void rust_helper_tcp_next_seq(struct sock *sk, u32 *snd_nxt, u32 *rcv_nxt)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	*snd_nxt = READ_ONCE(tp->snd_nxt);
	*rcv_nxt = READ_ONCE(tp->rcv_nxt);
}

/*
 * struct sock through bindgen does not keep the alignment of all its members: its Rust layout
 * is not the kernel's past the first cache lines. These read and write its callbacks and state
 * in C.
 */

/* Exchanges the state-change and data-ready callbacks with *@state_change and *@data_ready. */
__rust_helper void rust_helper_sk_swap_callbacks(struct sock *sk,
						 void (**state_change)(struct sock *sk),
						 void (**data_ready)(struct sock *sk))
{
	void (*sc)(struct sock *sk) = sk->sk_state_change;
	void (*dr)(struct sock *sk) = sk->sk_data_ready;

	sk->sk_state_change = *state_change;
	sk->sk_data_ready = *data_ready;
	*state_change = sc;
	*data_ready = dr;
}

__rust_helper int rust_helper_sk_state(const struct sock *sk)
{
	return READ_ONCE(sk->sk_state);
}

__rust_helper void *rust_helper_net_generic(const struct net *net, unsigned int id)
{
	return net_generic(net, id);
}

/*
 * What a datagram __skb_recv_udp() took arrived with: its IPv4 and UDP headers, copied to @iph
 * (20 bytes) and @udph (8 bytes), and whether its checksum is good (checked now unless the
 * device or an earlier look did, as udp_recvmsg() does). Returns its payload's length.
 */
__rust_helper unsigned int rust_helper_udp_skb_headers(struct sk_buff *skb, bool *csum_ok,
						       void *iph, void *udph)
{
	*csum_ok = udp_skb_csum_unnecessary(skb) || !__udp_lib_checksum_complete(skb);
	memcpy(iph, ip_hdr(skb), sizeof(struct iphdr));
	memcpy(udph, udp_hdr(skb), sizeof(struct udphdr));
	return udp_skb_len(skb);
}

/* Frees a datagram __skb_recv_udp() took (consume_skb() is inline without tracepoints). */
__rust_helper void rust_helper_udp_skb_consume(struct sk_buff *skb)
{
	consume_skb(skb);
}
