/* SPDX-License-Identifier: MIT */
/*
 * Addresses and routes (the connection layer's lowest room, conn.h):
 * numeric addresses made into sockaddrs, RoCE's GID of an address, the
 * route rdma_cm resolved in rig's terms, and M4's test of whether a peer
 * may be one of this NIC's own queue pairs. Nothing here holds state.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "conn.h"

/* @us from now on the monotonic clock; @us >= 0. */
int64_t route_deadline_after(int64_t us)
{
	if (us > INT64_MAX / 4000)
		return INT64_MAX / 2;
	return rig__now_ns() + us * 1000;
}

int route_sockaddr(const char *addr, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (addr && inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		return 0;
	}
	if (addr && inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		return 0;
	}
	return rig__fail(EINVAL, "'%s' is not a numeric IPv4 or IPv6 address",
			 addr ? addr : "(null)");
}

/* 0.0.0.0 or ::: a listener on every address, as rdma_cm takes it. */
bool route_wildcard(const struct sockaddr_storage *ss)
{
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;

	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return ss->ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
}

/* The id must sit on this NIC's device, or the endpoints would lie. */
int route_same_device(const struct rig_nic *nic, const struct rdma_cm_id *id,
		      const char *step)
{
	const char *dev = id->verbs ? ibv_get_device_name(id->verbs->device) : "no device";

	if (id->verbs && !strcmp(dev, nic->name))
		return 0;
	return rig__fail(ENODEV, "%s: the address is on %s, not on %s", step, dev, nic->name);
}

/* RoCE's GID of an address: an IPv6 address is its own, an IPv4 one is
 * ::ffff:a.b.c.d. False for any other family. */
bool route_gid_of_address(const struct sockaddr *sa, uint8_t gid[16])
{
	memset(gid, 0, 16);
	if (sa->sa_family == AF_INET) {
		gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(gid, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return true;
	}
	return false;
}

/*
 * M4 for a connection by address: whether the peer may be one of this
 * NIC's queue pairs. Its endpoint is its word. It must name the address
 * rdma_cm connected to (what the network delivered), and the queue pair
 * it names must have been made for the other end of this very connection
 * (its ports are ours, swapped): a process on this host connects from our
 * own address, and may name any queue pair of ours.
 */
bool route_peer_may_be_local(struct conn *c)
{
	uint16_t ours = rdma_get_src_port(c->id), theirs = rdma_get_dst_port(c->id);
	struct rig_nic *nic = c->loop->nic;
	struct rig__list *l;
	uint8_t gid[16];
	bool found = false;

	if (!route_gid_of_address(rdma_get_peer_addr(c->id), gid) ||
	    memcmp(gid, c->peer.gid, 16) || !ours || !theirs)
		return false;
	pthread_mutex_lock(&nic->lock);
	for (l = nic->qps.next; l != &nic->qps && !found; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, link);

		/* A far dialer serves no read (M4): no local peer either. */
		found = qp->self.qp == c->peer.qp && qp->cm_port[0] == theirs &&
			qp->cm_port[1] == ours && !qp->far;
	}
	pthread_mutex_unlock(&nic->lock);
	return found;
}

/*
 * M4 for a dialer, before its queue pair is made: whether it goes to an
 * address of this NIC, where it may meet a queue pair of ours. The route
 * to a local address leaves from that address itself (the local table's
 * route names it as its source), and route_same_device put the id on this
 * NIC; a route to any other address leaves from another. Addresses only:
 * the ports are not in the comparison.
 */
bool route_peer_is_self(struct conn *c)
{
	uint8_t ours[16], theirs[16];

	return route_gid_of_address(rdma_get_local_addr(c->id), ours) &&
	       route_gid_of_address(rdma_get_peer_addr(c->id), theirs) &&
	       !memcmp(ours, theirs, 16);
}

/* The peer's address as rdma_cm connected to it ("198.18.0.2",
 * "fd00::2"), or "" for an address of another family; true if IPv6. */
bool route_peer_ip(struct rdma_cm_id *id, char ip[INET6_ADDRSTRLEN])
{
	const struct sockaddr *sa = rdma_get_peer_addr(id);
	bool v6 = sa->sa_family == AF_INET6;

	if ((sa->sa_family != AF_INET && !v6) ||
	    !inet_ntop(sa->sa_family,
		       v6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
			  : (const void *)&((const struct sockaddr_in *)sa)->sin_addr,
		       ip, INET6_ADDRSTRLEN))
		ip[0] = 0;
	return v6;
}

/* "198.18.0.2:7471" or "[fd00::2]:7471": the peer's address and port as
 * rdma_cm connected to them, for rig_qp_peer and the failure's log line. */
static void peer_name(struct rdma_cm_id *id, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN];
	bool v6 = route_peer_ip(id, ip);

	if (!ip[0]) {
		out[0] = 0;
		return;
	}
	snprintf(out, len, v6 ? "[%s]:%u" : "%s:%u", ip, ntohs(rdma_get_dst_port(id)));
}

/* The smaller of two MTUs (enum ibv_mtu), 0 being none. */
static uint8_t mtu_min(uint8_t a, uint8_t b)
{
	return !a || (b && b < a) ? b : a;
}

/* The MTU (enum ibv_mtu) a connection may use on our side: the port's
 * active one, or its route's when smaller. A VLAN on the port may carry
 * smaller frames than the port (rxe and the NICs take theirs from the
 * netdev under them): rdma_cm sets a dialer's route MTU from its
 * netdev's, and route_resolved() reads the netdev under the source GID on
 * either side (c->path_mtu). */
uint8_t route_mtu(const struct conn *c, enum ibv_mtu active)
{
	const struct rdma_cm_id *id = c->id;
	const struct ibv_sa_path_rec *path = id->route.num_paths ? id->route.path_rec : NULL;
	uint8_t mtu = (uint8_t)active;

	if (path && path->mtu >= IBV_MTU_256)
		mtu = mtu_min(mtu, path->mtu);
	return mtu_min(mtu, c->path_mtu);
}

/*
 * Our port's active MTU (enum ibv_mtu) for connection @c, read once: the
 * MTU its endpoint gives the peer (rig2) and the one its queue pair takes
 * (rig__route.port_mtu) are then one reading, and a connection costs one
 * ibv_query_port (a system call) a side, not two. Not kept for the NIC:
 * a port's MTU follows its netdev's at once (rxe), with no event.
 */
int route_port_mtu(struct conn *c, uint8_t *mtu)
{
	struct rig_nic *nic = c->loop->nic;
	struct ibv_port_attr pattr;
	int ret;

	if (!c->port_mtu) {
		ret = ibv_query_port(nic->ctx, nic->port, &pattr);
		if (ret)
			return rig__fail_verbs(ret, nic, "ibv_query_port");
		c->port_mtu = (uint8_t)pattr.active_mtu;
	}
	*mtu = c->port_mtu;
	return 0;
}

/* The MTU (enum ibv_mtu) of netdev @ifindex, less RoCE v2's headers and
 * trailer (rdma_cm's own sum: GRH, UDP, BTH, the longest extended header,
 * ICRC: 96 bytes); 0 when it cannot be read. */
static uint8_t netdev_mtu(uint32_t ifindex)
{
	struct ifreq ifr;
	int fd, bytes = 0, m;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_ifindex = (int)ifindex;
	if (!ioctl(fd, SIOCGIFNAME, &ifr) && !ioctl(fd, SIOCGIFMTU, &ifr))
		bytes = ifr.ifr_mtu;
	close(fd);
	for (m = IBV_MTU_4096; m >= IBV_MTU_256; m--)
		if (bytes - 96 >= 128 << m)
			return (uint8_t)m;
	return 0;
}

/*
 * What rdma_cm resolved for the connection, as it would set it in the
 * RTR step: the index of the source GID, the traffic class (the ToS of
 * the id, or the device's default_roce_tos) and the hop limit. A port
 * with several addresses has a GID for each, and the peer may reach only
 * the one it connected to (another subnet, a VLAN kept for RoCE).
 */
int route_resolved(struct conn *c, struct rig__route *r)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RTR };
	struct rig_nic *nic = c->loop->nic;
	struct ibv_gid_entry gid;
	uint8_t port_mtu;
	int mask = 0, ret;

	ret = route_port_mtu(c, &port_mtu);
	if (ret)
		return ret;
	if (rdma_init_qp_attr(c->id, &attr, &mask))
		return rig__fail(errno, "%s: rdma_init_qp_attr: %s", step_name(c),
				 strerror(errno));
	if (!(mask & IBV_QP_AV) || !attr.ah_attr.is_global)
		return rig__fail(EPROTO, "%s: rdma_cm resolved no global route", step_name(c));
	/* The endpoint we sent names our address's GID; the packets must
	 * come from it. */
	if (ibv_query_gid_ex(nic->ctx, nic->port, attr.ah_attr.grh.sgid_index, &gid, 0) ||
	    memcmp(gid.gid.raw, c->qp->self.gid, 16))
		return rig__fail(EPROTO, "%s: rdma_cm's source GID (index %u of %s port %u) "
				 "is not the GID of the connection's address",
				 step_name(c), attr.ah_attr.grh.sgid_index, nic->name, nic->port);
	/* What the route carries on our side: what rdma_cm set, which is
	 * the dialer's netdev's; a listener reads its own netdev's, under
	 * the source GID, when it is not the port's (a VLAN on it): the
	 * port's MTU is that one's already. */
	c->path_mtu = (mask & IBV_QP_PATH_MTU) ? (uint8_t)attr.path_mtu : 0;
	if (c->accepting && gid.ndev_ifindex && gid.ndev_ifindex != nic->ifindex)
		c->path_mtu = mtu_min(c->path_mtu, netdev_mtu(gid.ndev_ifindex));
	*r = (struct rig__route){ .sgid_index = attr.ah_attr.grh.sgid_index,
				  .traffic_class = attr.ah_attr.grh.traffic_class,
				  .hop_limit = attr.ah_attr.grh.hop_limit,
				  .flow_label = attr.ah_attr.grh.flow_label,
				  .peer_mtu = c->peer_mtu,
				  .path_mtu = c->path_mtu,
				  .port_mtu = port_mtu };
	peer_name(c->id, r->peer, sizeof(r->peer));
	return 0;
}

/* What rdma_connect and rdma_accept send with our private data @priv
 * (@len bytes). */
void route_conn_param(struct rdma_conn_param *p, const uint8_t *priv, uint8_t len,
		      const struct rig__qp *qp)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = len;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = qp->pub.ibqp->qp_num;
	/* The CM exchanges these; rig_qp_connect sets the real ones. */
	p->responder_resources = 1;
	p->initiator_depth = 1;
}
