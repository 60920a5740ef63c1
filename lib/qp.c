/* SPDX-License-Identifier: MIT */
/*
 * Making, connecting and destroying queue pairs (rig(7) M1-M5, D1-D2).
 *
 * A queue pair is made in a loop, whose completion channel takes its CQs'
 * events for its life (events.c). It knows nothing of how its peer was
 * found: a connection made by address (conn.c) owns it through a release
 * hook, called when it is destroyed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>

#include "internal.h"
#include "probes.h"

#define RIG_24BITS 0xffffffu

/* Local ACK timeout 14: 4.096 us << 14 = 67 ms per transport retry (M3). */
#define RIG_ACK_TIMEOUT 14
/* RNR retry 7: retry without end while the peer has posted no receive. */
#define RIG_RNR_RETRY 7
/*
 * How long a sender backs off after a receiver-not-ready NAK: 12 is
 * 0.64 ms. 0 would mean 655 ms, a stall per late receive. On Soft-RoCE
 * every value from 1 to 14 rounds up to its 8 ms resend period.
 */
#define RIG_MIN_RNR_TIMER 12

/*
 * A make the NIC refused at @step with @err, the errno the step left;
 * the caller cleared errno before it. ENOMEM from creating a CQ or a QP
 * is most often the pinning of its queues refused: the kernel counts
 * them against RLIMIT_MEMLOCK (ib_umem_get), and a program that is not
 * root has 8 MiB by default, three or four queue pairs. Soft-RoCE pins
 * no queue memory, so there the limit is not the cause and is not named.
 *
 * @err 0: the provider returned NULL and set no errno. bnxt_re does,
 * when a request is over the device's limits (rdma-core,
 * providers/bnxt_re/verbs.c: __bnxt_re_create_qp returns NULL when
 * bnxt_re_check_qp_limits returns EINVAL, and sets no errno). Whatever
 * errno held before is no reason, so the step had it cleared; such a
 * refusal is -EIO, said to be one without a reason (rig_qp_make(3)).
 */
static int make_refused(int err, struct rig_nic *nic, const char *step)
{
	int64_t pinned = rig_nic_qp_pinned(nic);
	struct rlimit rl;
	char now[32] = "unknown";

	if (!err)
		return rig__fail(EIO, "%s refused by %s without a reason (the provider set no errno)",
				 step, nic->name);
	if (err != ENOMEM || pinned <= 0)
		return rig__fail_verbs(err, nic, step);
	if (!getrlimit(RLIMIT_MEMLOCK, &rl)) {
		if (rl.rlim_cur == RLIM_INFINITY)
			snprintf(now, sizeof(now), "unlimited");
		else
			snprintf(now, sizeof(now), "%llu KiB",
				 (unsigned long long)rl.rlim_cur / 1024);
	}
	return rig__fail(err, "%s refused by %s: %s; queue memory is pinned and counts against RLIMIT_MEMLOCK (%s now; a queue pair pins about %lld KiB on %s): raise `ulimit -l`",
			 step, nic->name, strerror(err), now, (long long)pinned / 1024, nic->name);
}

/*
 * The send queue and its CQ hold one request more than the ring: a
 * liveness probe's (ring.c, rig__qp_probe), posted only on an idle ring,
 * one at a time, so the ring's RIG_RING_ENTRIES stay the application's
 * (Q1) even while the probe's CQE waits to be read: the owner may post
 * all 4095 entries after a probe, and then 4096 requests and CQEs are
 * out. What the one more costs, as rdma-core's providers size queues:
 *
 * - bnxt_re (providers/bnxt_re/verbs.c, bnxt_re_get_sqmem_size): the
 *   send queue's depth is max_send_wr + 1 + BNXT_RE_FULL_FLAG_DELTA
 *   (128), rounded up to a power of two (bnxt_re_init_depth): 4095 and
 *   4096 both give 8192, the same queue. (A kernel that turns the
 *   rounding off, BNXT_RE_COMP_MASK_UCNTX_POW2_DISABLED: in variable WQE
 *   mode the slots are aligned to 256, the same again; in static mode
 *   one 128-byte WQE more.)
 * - mlx5 (providers/mlx5/verbs.c, mlx5_calc_sq_size): the queue's bytes,
 *   max_send_wr times the WQE's size (64 for this RC queue pair, see
 *   create_qp), rounded up to a power of two: 4095 x 64 and 4096 x 64
 *   both give 256 KiB.
 * - The send CQ does cost: mlx5 allocates roundup_pow_of_two(cqe + 1)
 *   CQEs (create_cq), 8192 rather than 4096, 256 KiB more pinned;
 *   bnxt_re, where its kernel and library round too, as much or half
 *   (pinned.c says by which stack).
 * - Soft-RoCE (the kernel's rxe_queue_init) gives roundup_pow_of_two(
 *   n + 1) slots to the send queue and the send CQ alike: both double,
 *   and a queue pair's kernel memory goes from 2.2 to 3.8 MiB (rig(7)
 *   SOFT-ROCE).
 *
 * RIG_PROBES_OUT (internal.h) is that one; a device that cannot take
 * RIG__QUEUE_DEPTH requests and CQEs is refused at open (nic.c).
 */

/*
 * A NIC set shallower (rig_nic_set_depth, RIG_QP_DEPTH) gives the queues
 * and CQs under the rings @depth entries (the send side one more, the
 * probe's): the ring keeps its 4095 (Q1), and entries beyond the NIC's
 * depth wait in it (ring.c, rig(7) Q4).
 */
static int ring_init(struct rig__qp *qp, struct rig__ring *ring, struct rig__slot *slot,
		     uint32_t depth, int extra)
{
	struct rig_nic *nic = qp->nic;

	ring->slot = slot;
	ring->depth = depth;
	errno = 0;	/* a refusal may set none (make_refused) */
	ring->cq = ibv_create_cq(nic->ctx, (int)depth + extra, qp, qp->loop->channel,
				 qp->loop->comp_vector);
	if (!ring->cq)
		return make_refused(errno, nic, "ibv_create_cq");
	return 0;
}

/*
 * Both rings' slot arrays, 2 x 4096 x 16 bytes, in one anonymous mapping
 * of their own rather than from malloc: the kernel gives a page of it
 * only when a post first writes there, so an idle queue pair, or one
 * whose rings have not wrapped, holds a page or two of the 128 KiB, not
 * all of it (calloc() clears, and so makes resident, all but the part of
 * the heap it has just grown), and a destroyed one gives it all back.
 * One mapping, not two: a process has vm.max_map_count mappings (65530
 * by default), and on Soft-RoCE each queue pair maps four queues already.
 */
#define RIG_SLOTS_BYTES (2 * RIG__SLOTS * sizeof(struct rig__slot))

static struct rig__slot *slots_map(void)
{
	void *p = mmap(NULL, RIG_SLOTS_BYTES, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* The send ring's slots start the mapping. */
static void slots_unmap(struct rig__qp *qp)
{
	munmap(qp->pub.ring[RIG_SEND].slot, RIG_SLOTS_BYTES);
}

static void ring_fini(struct rig__ring *ring)
{
	ibv_destroy_cq(ring->cq);
}

static uint32_t random_psn(void)
{
	uint32_t r;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint32_t)random();
	return r & RIG_24BITS;
}

/*
 * ibv_create_qp, asking mlx5 for its smallest send WQE. mlx5 sizes every
 * send WQE for the largest operation the queue pair may post
 * (rdma-core providers/mlx5/verbs.c: sq_overhead, _sq_overhead,
 * mlx5_calc_send_wqe): without send_ops_flags an RC queue pair may post
 * any, a memory-window bind the largest (192 bytes of segments), so each
 * WQE of one gather entry takes 256 bytes. Told that only sends, RDMA
 * writes (the liveness probe) and reads are posted, the overhead is a
 * control and a remote-address segment, 32 bytes, and with one data
 * segment a WQE is one 64-byte block: a send queue, pinned, of a quarter
 * the bytes (pinned.c). ibv_post_send stays allowed on such a queue pair
 * (libibverbs/man/ibv_wr_post.3.md: ibv_post_send and the ibv_wr_* calls
 * may interleave outside each other's critical region; mlx5's
 * _mlx5_post_send builds each request's segments whatever the flags).
 * IBV_QP_INIT_ATTR_SEND_OPS_FLAGS came with rdma-core v24; a provider
 * that refuses the extended create gets the plain one. Other providers
 * size their WQEs apart from the operations and are asked plainly.
 */
static struct ibv_qp *create_qp(struct rig_nic *nic, struct ibv_pd *pd,
				struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex ax;
	struct ibv_qp *qp;

	if (nic->vendor_id == RIG_MLX5_VENDOR_ID) {
		memset(&ax, 0, sizeof(ax));
		ax.qp_context = attr->qp_context;
		ax.send_cq = attr->send_cq;
		ax.recv_cq = attr->recv_cq;
		ax.cap = attr->cap;
		ax.qp_type = attr->qp_type;
		ax.sq_sig_all = attr->sq_sig_all;
		ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ax.pd = pd;
		ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				    IBV_QP_EX_WITH_RDMA_READ;
		qp = ibv_create_qp_ex(nic->ctx, &ax);
		if (qp) {
			attr->cap = ax.cap;
			return qp;
		}
		errno = 0;	/* the plain create's refusal is the one told */
	}
	return ibv_create_qp(pd, attr);
}

int rig__qp_make(struct rig_loop *loop, bool far, struct rig_qp **out)
{
	struct ibv_qp_init_attr attr = { 0 };
	struct rig__slot *slots;
	struct rig_nic *nic;
	struct rig__qp *qp;
	uint32_t depth;
	int ret;

	if (!loop || !out)
		return rig__fail(EINVAL, "rig_qp_make: NULL argument");
	nic = loop->nic;
	depth = __atomic_load_n(&nic->depth, __ATOMIC_RELAXED);
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return rig__fail(ENOMEM, "rig_qp_make: out of memory");
	qp->nic = nic;
	qp->loop = loop;
	rig__list_init(&qp->live_link);
	slots = slots_map();
	if (!slots) {
		ret = rig__fail(ENOMEM, "rig_qp_make: no memory for a ring");
		goto out_free;
	}
	ret = ring_init(qp, &qp->pub.ring[RIG_SEND], slots, depth, RIG_PROBES_OUT);
	if (ret)
		goto out_slots;
	ret = ring_init(qp, &qp->pub.ring[RIG_RECEIVE], slots + RIG__SLOTS, depth, 0);
	if (ret)
		goto out_send_ring;

	attr.qp_context = qp;
	attr.send_cq = qp->pub.ring[RIG_SEND].cq;
	attr.recv_cq = qp->pub.ring[RIG_RECEIVE].cq;
	attr.cap.max_send_wr = depth + RIG_PROBES_OUT;
	attr.cap.max_recv_wr = depth;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;	/* every entry gets a completion (Q2) */
	errno = 0;	/* a refusal may set none (make_refused) */
	qp->pub.ibqp = create_qp(nic, far ? nic->far_pd : nic->pd, &attr);
	if (!qp->pub.ibqp) {
		ret = make_refused(errno, nic, "ibv_create_qp");
		goto out_receive_ring;
	}
	qp->pub.nic = nic;
	qp->far = far;
	qp->pub.lkey_at = rig__lkey_at(far);
	qp->shallow = depth < RIG_RING_ENTRIES;
	if (qp->shallow)
		pthread_spin_init(&qp->feed_lock, PTHREAD_PROCESS_PRIVATE);
	qp->pub.broken = RIG__UNCONNECTED;
	qp->pub.msg_max = nic->msg_max;
	qp->state = RIG__RESET;
	qp->self.qp = qp->pub.ibqp->qp_num;
	qp->self.psn = random_psn();
	memcpy(qp->self.gid, nic->gid.raw, 16);
	memcpy(qp->self.mac, nic->mac, 6);
	/*
	 * Listed and its loop told in one step under the NIC's lock, which
	 * rig_uring_watch holds while it sets the loop watched and arms the
	 * loop's listed queue pairs: the watch either finds this one listed
	 * or has set the loop watched, and the loop arms it when told. Nor
	 * can anyone arm it or fail it (both need the lock) before the loop
	 * has readied its rings' places in the news.
	 */
	pthread_mutex_lock(&nic->lock);
	rig__list_add(&nic->qps, &qp->link);
	loop->free_qp = rig__qp_free;	/* its close frees those left */
	rig__events_add(qp);
	pthread_mutex_unlock(&nic->lock);
	RIG_PROBE(qp_made, qp->self.qp, nic->name, loop->id);
	*out = &qp->pub;
	return 0;

out_receive_ring:
	ring_fini(&qp->pub.ring[RIG_RECEIVE]);
out_send_ring:
	ring_fini(&qp->pub.ring[RIG_SEND]);
out_slots:
	munmap(slots, RIG_SLOTS_BYTES);
out_free:
	free(qp);
	return ret;
}

/* Its peer is not known yet: near, so that it may serve reads of a peer
 * of this NIC handle (rig(7) M4); rig__qp_connect checks what the NIC
 * grants it when the peer is any other. */
RIG_EXPORT __cold int rig_qp_make_in(struct rig_loop *loop, struct rig_qp **out)
{
	return rig__qp_make(loop, false, out);
}

RIG_EXPORT __cold int rig_qp_make(struct rig_nic *nic, struct rig_qp **out)
{
	if (!nic)
		return rig__fail(EINVAL, "rig_qp_make: NULL argument");
	return rig_qp_make_in(nic->own, out);
}

RIG_EXPORT void rig_qp_endpoint(const struct rig_qp *qp, struct rig_endpoint *out)
{
	*out = container_of(qp, const struct rig__qp, pub)->self;
}

/*
 * rig(7) M4: a queue pair serves its peer's reads only when the peer is one
 * of this NIC handle's own queue pairs (itself included). A GID says which
 * device the peer is on, not which process: another process on this host
 * shares the device and the GID, and must never read our regions.
 */
static int peer_is_own(struct rig_nic *nic, const struct rig_endpoint *peer)
{
	struct rig__list *l;
	int own = 0;

	/* The GID each queue pair gives in its endpoint: the NIC's, or the
	 * address a connection by address used (conn.c). */
	pthread_mutex_lock(&nic->lock);
	for (l = nic->qps.next; l != &nic->qps && !own; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, link);

		/* A far queue pair serves no read: it is no local peer. */
		own = qp->self.qp == peer->qp && !memcmp(qp->self.gid, peer->gid, 16) &&
		      qp->state != RIG__DESTROYED && !qp->far;
	}
	pthread_mutex_unlock(&nic->lock);
	return own;
}

static int modify(struct rig__qp *qp, struct ibv_qp_attr *attr, int mask,
		  const char *step)
{
	int ret = ibv_modify_qp(qp->pub.ibqp, attr, mask);

	return ret ? rig__fail_verbs(ret, qp->nic, step) : 0;
}

/*
 * rig(7) M4 on a near queue pair whose peer is not this NIC handle's,
 * after RESET->INIT and before any packet can be served (RTR): what the
 * NIC granted must be what rig asked (@asked). The kernel's bnxt_re
 * before Linux 6.13 ORs remote read and write into the access of every
 * modify that carries IBV_QP_ACCESS_FLAGS (drivers/infiniband/hw/bnxt_re/
 * ib_verbs.c, bnxt_re_modify_qp: "Temp: Set all params on QP as of now";
 * fixed by "RDMA/bnxt_re: Fix access flags for MR and QP modify"), and
 * regions of the near domain grant remote read: such a queue pair would
 * serve any peer's reads, so it goes back to RESET and the connect fails.
 * Whether a firmware then serves reads with max_dest_rd_atomic 0 no
 * longer matters: the queue pair never reaches RTR.
 */
static int access_check(struct rig__qp *qp, int asked, bool by_address)
{
	const int remote = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;
	int extra, ret;

	memset(&a, 0, sizeof(a));
	ret = ibv_query_qp(qp->pub.ibqp, &a, IBV_QP_ACCESS_FLAGS, &ia);
	if (ret)
		return rig__fail_verbs(ret, qp->nic, "ibv_query_qp");
	extra = (int)a.qp_access_flags & remote & ~asked;
	if (!extra)
		return 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	if (!ibv_modify_qp(qp->pub.ibqp, &a, IBV_QP_STATE))
		qp->state = RIG__RESET;
	/* A dial to this NIC's own address made its queue pair near before
	 * it knew the peer (handshake.c, make_qp): a peer in another
	 * process of this host meets the same refusal. */
	return rig__fail(EOPNOTSUPP, "rig_qp_connect: %s granted queue pair 0x%06x remote %s%s%sthat rig did not ask for: "
			 "the NIC grants every queue pair remote access (bnxt_re before Linux 6.13): %s",
			 qp->nic->name, qp->self.qp,
			 extra & IBV_ACCESS_REMOTE_READ ? "read " : "",
			 extra & IBV_ACCESS_REMOTE_WRITE ? "write " : "",
			 extra & IBV_ACCESS_REMOTE_ATOMIC ? "atomic " : "",
			 qp->nic->near_only ? "the program was built against rig 0.3 or older, "
					      "whose queue pairs are all near: rebuild it"
			 : by_address ? "a connection to this NIC's own address from outside its "
					"NIC handle is refused"
				      : "connect by address, whose queue pair faces no readable region");
}

/* rig_qp_connect(), where a peer that names one of this NIC's own queue
 * pairs is believed (M4) only if @may_be_local: a connection by address
 * says no when the endpoint's GID is not the address it connected to.
 * @route, if set, is what rdma_cm resolved for it: the source GID, the
 * traffic class and the hop limit, and the MTU the peer gave; else the
 * NIC's GID, 0 and 64, and the port's active MTU. */
int rig__qp_connect(struct rig_qp *pub, const struct rig_endpoint *peer,
		    bool may_be_local, const struct rig__route *route)
{
	struct rig__qp *qp;
	struct rig_nic *nic;
	struct ibv_port_attr pattr;
	struct ibv_qp_attr a;
	char gid[INET6_ADDRSTRLEN] = "";
	int local, asked, ret;

	if (!pub || !peer)
		return rig__fail(EINVAL, "rig_qp_connect: NULL argument");
	qp = rig__qp(pub);
	nic = qp->nic;
	if (qp->closing)
		return rig__fail(EINVAL, "rig_qp_connect: the queue pair is closing (rig_qp_close)");
	if (qp->state == RIG__CONNECTED)
		return rig__fail(EINVAL, "rig_qp_connect: already connected");
	if (peer->qp > RIG_24BITS || peer->psn > RIG_24BITS)
		return rig__fail(EINVAL, "rig_qp_connect: peer qp %#x or psn %#x over 24 bits",
				 peer->qp, peer->psn);
	/* A connection by address read it for its endpoint already. */
	if (route && route->port_mtu) {
		pattr.active_mtu = (enum ibv_mtu)route->port_mtu;
	} else {
		ret = ibv_query_port(nic->ctx, nic->port, &pattr);
		if (ret)
			return rig__fail_verbs(ret, nic, "ibv_query_port");
	}
	local = !qp->far && may_be_local && peer_is_own(nic, peer);
	qp->peer_known = true;
	qp->peer_qpn = peer->qp;
	memcpy(qp->peer_gid, peer->gid, 16);
	if (route && route->peer[0])
		snprintf(qp->peer, sizeof(qp->peer), "%s", route->peer);
	else if (!inet_ntop(AF_INET6, peer->gid, qp->peer, sizeof(qp->peer)))
		qp->peer[0] = 0;

	/* A connect refused part-way starts over from RESET (M5). */
	if (qp->state == RIG__HALF_CONNECTED) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RESET;
		ret = modify(qp, &a, IBV_QP_STATE, "->RESET");
		if (ret)
			return ret;
	}
	qp->state = RIG__HALF_CONNECTED;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = nic->port;
	/* Only a peer on this NIC may read; nobody may write the
	 * application's memory (M4): no region of its grants remote write
	 * (region.c). The queue pair of a connection by address takes RDMA
	 * WRITEs all the same, for its peer's liveness probes: a byte into
	 * the NIC's sink, the one region that grants it, or zero bytes from
	 * a peer of rig 0.3 (ring.c, rig__qp_probe). */
	asked = (local ? IBV_ACCESS_REMOTE_READ : 0) |
		(route ? IBV_ACCESS_REMOTE_WRITE : 0);
	a.qp_access_flags = (unsigned)asked;
	ret = modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
		     IBV_QP_ACCESS_FLAGS, "RESET->INIT");
	if (ret)
		return ret;
	/* A far queue pair's domain grants nobody anything (region.c); a
	 * near one serves only what its access lets in. */
	if (!local && !qp->far) {
		ret = access_check(qp, asked, route != NULL);
		if (ret)
			return ret;
	}

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	/* The peer's port may carry smaller frames than ours: a packet of
	 * our MTU would be dropped on its link (rig(7) HARDWARE). */
	a.path_mtu = pattr.active_mtu;
	if (route && route->peer_mtu && route->peer_mtu < a.path_mtu)
		a.path_mtu = route->peer_mtu;
	/* The route's netdev may carry smaller frames than the port's (a
	 * VLAN on it): a packet of the port's MTU would not leave it. */
	if (route && route->path_mtu && route->path_mtu < a.path_mtu)
		a.path_mtu = route->path_mtu;
	a.dest_qp_num = peer->qp;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = local ? nic->max_rd_atomic : 0;
	a.min_rnr_timer = RIG_MIN_RNR_TIMER;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = route ? route->sgid_index : nic->gid_index;
	a.ah_attr.grh.hop_limit = route ? route->hop_limit : 64;
	a.ah_attr.grh.traffic_class = route ? route->traffic_class : 0;
	a.ah_attr.grh.flow_label = route ? route->flow_label : 0;
	a.ah_attr.port_num = nic->port;
	ret = modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
		     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
		     "INIT->RTR");
	if (ret)
		return ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = RIG_ACK_TIMEOUT;
	a.retry_cnt = nic->retry_cnt;
	a.rnr_retry = RIG_RNR_RETRY;
	a.sq_psn = qp->self.psn;
	a.max_rd_atomic = local ? nic->max_rd_atomic : 0;
	ret = modify(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
		     "RTR->RTS");
	if (ret)
		return ret;

	qp->state = RIG__CONNECTED;
	qp->pub.local = local;

	__atomic_and_fetch(&qp->pub.broken, ~(uint32_t)RIG__UNCONNECTED,
			   __ATOMIC_RELAXED);
	/* A RoCE v2 GID is an IPv6 address (an IPv4 one is ::ffff:a.b.c.d). */
	if (RIG_PROBES_ON)
		inet_ntop(AF_INET6, peer->gid, gid, sizeof(gid));
	RIG_PROBE(qp_connected, qp->self.qp, peer->qp, gid, local);
	return 0;
}

RIG_EXPORT __cold int rig_qp_connect(struct rig_qp *pub,
				     const struct rig_endpoint *peer)
{
	return rig__qp_connect(pub, peer, true, NULL);
}

/* The CQs, and the slots of the rings they fill. */
static void destroy_cqs(struct rig__qp *qp)
{
	ring_fini(&qp->pub.ring[RIG_SEND]);
	ring_fini(&qp->pub.ring[RIG_RECEIVE]);
	slots_unmap(qp);
}

/* Destroys what the NIC holds for @qp; no lock of its NIC or loop may
 * be held. On a refusal the queue pair stays listed, marked destroyed,
 * for rig_nic_close to try again (D2). */
int rig__qp_teardown(struct rig__qp *qp)
{
	struct rig_nic *nic = qp->nic;
	struct rig__qp_owner *owner = qp->owner;
	uint32_t qpn = qp->self.qp;
	int ret;

	/* Its connection first: no rdma_cm event names it after this, and
	 * no liveness pass probes it (the owner takes it off the list under
	 * the lock the pass puts it there with). Only a connection's queue
	 * pairs are probed. */
	if (owner)
		owner->release(owner);
	ret = ibv_destroy_qp(qp->pub.ibqp);
	if (ret) {
		qp->state = RIG__DESTROYED;
		return rig__fail_verbs(ret, nic, "ibv_destroy_qp");
	}
	/* Unlisted, no async event finds it. */
	pthread_mutex_lock(&nic->lock);
	rig__list_del(&qp->link);
	pthread_mutex_unlock(&nic->lock);
	rig__events_forget(qp, destroy_cqs);
	if (qp->shallow) {
		/* The loop's thread may be moving entries (rig__qp_feed):
		 * it holds the lock while it does. */
		rig__ring_feed_lock(qp);
		rig__ring_feed_unlock(qp);
		pthread_spin_destroy(&qp->feed_lock);
	}
	free(qp->waiting[RIG_SEND]);
	free(qp->waiting[RIG_RECEIVE]);
	RIG_PROBE(qp_destroyed, qpn, qp->error);
	return 0;
}

/* rig__qp_teardown(), then the memory. */
int rig__qp_free(struct rig__qp *qp)
{
	int ret = rig__qp_teardown(qp);

	if (!ret)
		free(qp);
	return ret;
}

RIG_EXPORT __cold int rig_qp_destroy(struct rig_qp *pub)
{
	if (!pub)
		return rig__fail(EINVAL, "rig_qp_destroy: NULL queue pair");
	if (rig__qp(pub)->closing)
		return rig__fail(EINVAL, "rig_qp_destroy: the queue pair is closing (rig_qp_close)");
	return rig__qp_free(rig__qp(pub));
}

RIG_EXPORT int rig_qp_peer(const struct rig_qp *pub, struct rig_qp_peer *p)
{
	const struct rig__qp *qp;
	struct rig_qp_peer all;

	if (!pub || !p || p->size < 8)
		return rig__fail(EINVAL, "rig_qp_peer: %s", !pub || !p ? "NULL argument" :
				 "size is not set to sizeof(struct rig_qp_peer)");
	qp = container_of(pub, const struct rig__qp, pub);
	if (!qp->peer_known)
		return rig__fail(EINVAL, "rig_qp_peer: queue pair 0x%06x was never connected",
				 pub->ibqp->qp_num);
	all = (struct rig_qp_peer){ .size = sizeof(all), .qp = pub->ibqp->qp_num,
				    .peer_qp = qp->peer_qpn };
	memcpy(all.gid, qp->peer_gid, 16);
	snprintf(all.addr, sizeof(all.addr), "%s", qp->peer);
	rig__give_sized(p, p->size, &all, sizeof(all));
	return 0;
}

/*
 * rig_qp_close: the destroy runs on the loop's helper thread (loop.c), as
 * a teardown job; its outcome comes out of the loop as RIG_NEWS_CLOSED.
 * The queue pair's memory stays until that news is handed out, so that
 * the application's posts and polls in between find RIG__CLOSED and fail
 * without touching what the helper destroys.
 */
struct closing {
	struct rig__job job;
	struct rig__news news;
	struct rig__qp *qp;
	bool freeable;		/* the NIC holds nothing of it */
};

static void close_handed(struct rig__news *n)
{
	struct closing *k = container_of(n, struct closing, news);

	/* After a refusal the NIC's list keeps it, for rig_nic_close (D2). */
	if (k->freeable)
		free(k->qp);
	free(k);
}

static void close_work(struct rig__job *job)
{
	struct closing *k = container_of(job, struct closing, job);
	struct rig_loop *loop = k->qp->loop;

	k->news.what.result = rig__qp_teardown(k->qp);
	k->freeable = !k->news.what.result;
	/* Posted once every ring's news of it is gone (events_forget):
	 * nothing of it comes out of the loop after this. */
	rig__loop_post(loop, &k->news);
}

RIG_EXPORT __cold int rig_qp_close(struct rig_qp *pub, uint64_t cookie)
{
	struct rig__qp *qp;
	struct closing *k;

	if (!pub)
		return rig__fail(EINVAL, "rig_qp_close: NULL queue pair");
	qp = rig__qp(pub);
	if (qp->closing)
		return rig__fail(EINVAL, "rig_qp_close: the queue pair is closing already");
	/* Nobody hands out the NIC's own loop's news: its queue pairs (of
	 * rig_qp_make, rig_dial, rig_accept) are destroyed in place. */
	if (qp->loop == qp->nic->own)
		return rig__fail(EINVAL, "rig_qp_close: the queue pair is in no loop of the "
				 "application's (rig_qp_make, rig_dial, rig_accept): "
				 "rig_qp_destroy it");
	if (qp->state == RIG__DESTROYED)
		return rig__fail(EINVAL, "rig_qp_close: the queue pair was destroyed (D2)");
	k = calloc(1, sizeof(*k));
	if (!k)
		return rig__fail(ENOMEM, "rig_qp_close: out of memory");
	*k = (struct closing){ .job = { .work = close_work, .teardown = true }, .qp = qp };
	rig__list_init(&k->news.link);
	k->news.what = (struct rig_ready){ pub, RIG_SEND, RIG_NEWS_CLOSED, 0, cookie };
	k->news.handed = close_handed;
	/* Under feed_lock: the loop's thread moves no entry after it. */
	rig__ring_feed_lock(qp);
	__atomic_or_fetch(&pub->broken, RIG__CLOSED, __ATOMIC_RELEASE);
	rig__ring_feed_unlock(qp);
	rig__loop_closing(qp);
	/* A loop whose helper cannot start pays the destroy itself. */
	if (rig__loop_defer(qp->loop, &k->job))
		close_work(&k->job);
	return 0;
}

RIG_EXPORT int rig_qp_set_cookie(struct rig_qp *pub, uint64_t cookie)
{
	if (!pub)
		return rig__fail(EINVAL, "rig_qp_set_cookie: NULL queue pair");
	__atomic_store_n(&rig__qp(pub)->cookie, cookie, __ATOMIC_RELAXED);
	return 0;
}

RIG_EXPORT uint64_t rig_qp_cookie(const struct rig_qp *pub)
{
	return pub ? __atomic_load_n(&container_of(pub, const struct rig__qp, pub)->cookie,
				     __ATOMIC_RELAXED) : 0;
}

RIG_EXPORT int rig_qp_tag(struct rig_qp *pub, enum rig_side side, uint64_t cookie)
{
	struct rig__ring *q;

	if (!pub || (unsigned)side > RIG_RECEIVE)
		return rig__fail(EINVAL, "rig_qp_tag: %s", pub ? "bad side" : "NULL queue pair");
	q = &pub->ring[side];
	if (q->head == q->tail)
		return rig__fail(EINVAL, "rig_qp_tag: no entry is due on the %s ring",
				 side == RIG_SEND ? "send" : "receive");
	q->slot[(q->head - 1) & RIG__MASK].cookie = cookie;
	return 0;
}
