/*
 * mwpeer: the Linux rxe side of goroce's memory-window interop test
 * (verbs/mw_lab_test.go, TestLabMW). A test tool built on the host
 * against rdma-core's libibverbs and librdmacm and run in a lab VM; it is
 * no part of goroce, which stays cgo-free.
 *
 * It listens with librdmacm (rdma_create_ep/rdma_get_request/rdma_accept,
 * as rdma_server does) for one RC connection from goroce, then exchanges
 * 32-byte control messages over that QP (struct msg) around the accesses
 * through one type 2 memory window:
 *
 *   -b rxe:    this side registers a region (LOCAL_WRITE|MW_BIND, no
 *              remote access of its own), allocates a type 2 window and
 *              binds it with an IBV_WR_BIND_MW work request; sends WINDOW
 *              (rkey, addr, len); goroce WRITEs and READs the window and
 *              sends DONE (-i send: a SEND_WITH_INV naming the rkey, which
 *              invalidates the window here); with -i local this side posts
 *              IBV_WR_LOCAL_INV. It checks the region, sends INVALIDATED,
 *              and waits for goroce's disconnect after goroce's next
 *              access failed; the region must not have changed, and the
 *              QP state says whether the responder saw the violation.
 *   -b goroce: goroce binds a type 2 window and sends WINDOW; this side
 *              WRITEs and READs through it and checks the bytes, sends DONE
 *              (-i send: SEND_WITH_INV naming the window's rkey, which
 *              invalidates goroce's window; -i local: a SEND, after which
 *              goroce posts LOCAL_INV), waits for INVALIDATED and WRITEs
 *              once more: that must complete with IBV_WC_REM_ACCESS_ERR.
 *
 * Every step prints a "mwpeer: " line; the last is "mwpeer: ok" (exit 0)
 * or "mwpeer: FAIL ..." (exit 1).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

enum { MSG_WINDOW = 1, MSG_DONE = 2, MSG_INVALIDATED = 3 };

/* The control message, little-endian on both sides (x86). */
struct msg {
	uint32_t type;
	uint32_t rkey;
	uint64_t addr;
	uint64_t len;
	uint64_t pad;
};

enum {
	REGION = 8192, /* this side's region (-b rxe) */
	WOFF = 1024,   /* the window: region offsets [WOFF, WOFF+WLEN) */
	WLEN = 2048,
	NRECV = 4,
	WAIT_MS = 90000, /* a step's bound: the emulated VM is slow */
};

static struct rdma_cm_id *id;
static struct msg recv_msgs[NRECV], send_msg;
static struct ibv_mr *recv_mr, *send_mr;

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("mwpeer: FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static void say(const char *fmt, ...)
{
	va_list ap;

	printf("mwpeer: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* poll1 waits for one completion on cq. */
static struct ibv_wc poll1(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	long long end = now_ms() + WAIT_MS;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			fail("ibv_poll_cq (%s): %d", what, n);
		if (n == 1)
			return wc;
		if (now_ms() > end)
			fail("no completion for %s in %d ms", what, WAIT_MS);
		usleep(1000);
	}
}

static void want_ok(struct ibv_wc wc, enum ibv_wc_opcode op, const char *what)
{
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != op)
		fail("%s: completion status %d (%s) opcode %d, want IBV_WC_SUCCESS opcode %d",
		     what, wc.status, ibv_wc_status_str(wc.status), wc.opcode, op);
}

static void post_recv(int i)
{
	struct ibv_sge sge = { (uintptr_t)&recv_msgs[i], sizeof(recv_msgs[i]), recv_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(id->qp, &wr, &bad))
		fail("ibv_post_recv: %s", strerror(errno));
}

/* recv_msg waits for the next control message and checks its type. */
static struct msg recv_msg(uint32_t type, struct ibv_wc *wcp)
{
	struct ibv_wc wc = poll1(id->recv_cq, "a receive");
	struct msg m;

	if (wc.status != IBV_WC_SUCCESS)
		fail("receive (want message %u): status %d (%s)", type, wc.status, ibv_wc_status_str(wc.status));
	m = recv_msgs[wc.wr_id];
	if (m.type != type)
		fail("received message %u, want %u", m.type, type);
	post_recv(wc.wr_id);
	if (wcp)
		*wcp = wc;
	return m;
}

/* send_ctl sends a control message; a non-zero inv makes it a
 * SEND_WITH_INV naming that rkey. It returns the send's completion. */
static struct ibv_wc send_ctl_wc(uint32_t type, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t inv)
{
	struct ibv_sge sge = { (uintptr_t)&send_msg, sizeof(send_msg), send_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 100 + type, .sg_list = &sge, .num_sge = 1,
				  .opcode = inv ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	send_msg = (struct msg){ .type = type, .rkey = rkey, .addr = addr, .len = len };
	wr.invalidate_rkey = inv;
	if (ibv_post_send(id->qp, &wr, &bad))
		fail("ibv_post_send (message %u): %s", type, strerror(errno));
	return poll1(id->send_cq, "a send");
}

static void send_ctl(uint32_t type, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t inv)
{
	want_ok(send_ctl_wc(type, rkey, addr, len, inv), IBV_WC_SEND, inv ? "SEND_WITH_INV" : "SEND");
}

/* rdma posts one RDMA WRITE or READ of len bytes of mr at off, and returns
 * its completion. */
static struct ibv_wc rdma(enum ibv_wr_opcode op, struct ibv_mr *mr, size_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)mr->addr, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 200 + op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(id->qp, &wr, &bad))
		fail("ibv_post_send (RDMA opcode %d): %s", op, strerror(errno));
	return poll1(id->send_cq, "an RDMA operation");
}

static uint8_t canary(size_t i) { return (uint8_t)(i * 7 + 3); }
static uint8_t pattern(size_t i) { return (uint8_t)(i * 13 + 5); } /* what the writer writes */

static struct ibv_mr *reg(size_t len, int access)
{
	void *buf = calloc(1, len);
	struct ibv_mr *mr = buf ? ibv_reg_mr(id->pd, buf, len, access) : NULL;

	if (!mr)
		fail("ibv_reg_mr %zu bytes access %#x: %s", len, access, strerror(errno));
	return mr;
}

/* check_region checks this side's region: the window holds the writer's
 * pattern, the rest its canary. */
static void check_region(const uint8_t *b, const char *when)
{
	for (size_t i = 0; i < REGION; i++) {
		uint8_t want = (i >= WOFF && i < WOFF + WLEN) ? pattern(i - WOFF) : canary(i);

		if (b[i] != want)
			fail("%s: region byte %zu is %#x, want %#x", when, i, b[i], want);
	}
	say("%s: region holds the written window and the canary around it", when);
}

/* wait_disconnect waits for goroce's DREQ (goroce closes after its failed
 * access) on an event channel the ID moves to. */
static void wait_disconnect(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *e;
	struct pollfd pfd;

	if (!ch || rdma_migrate_id(id, ch))
		fail("rdma_migrate_id: %s", strerror(errno));
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	for (;;) {
		if (poll(&pfd, 1, WAIT_MS) != 1)
			fail("no CM event in %d ms (want DISCONNECTED)", WAIT_MS);
		if (rdma_get_cm_event(ch, &e))
			fail("rdma_get_cm_event: %s", strerror(errno));
		enum rdma_cm_event_type t = e->event;

		rdma_ack_cm_event(e);
		say("cm event %s", rdma_event_str(t));
		if (t == RDMA_CM_EVENT_DISCONNECTED)
			return;
	}
}

static void rxe_binds(int send_inv)
{
	struct ibv_mr *mr = reg(REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	uint8_t *b = mr->addr;
	struct ibv_mw *mw;
	struct ibv_wc wc;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	uint32_t rkey;

	for (size_t i = 0; i < REGION; i++)
		b[i] = canary(i);
	mw = ibv_alloc_mw(id->pd, IBV_MW_TYPE_2);
	if (!mw)
		fail("ibv_alloc_mw(IBV_MW_TYPE_2): %s", strerror(errno));

	/* A type 2 window is bound by a send work request (IBTA 10.6.7.2.2);
	 * its new rkey's key byte must differ from the former one
	 * (ibv_inc_rkey), and the provider does not update mw->rkey. */
	rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)b + WOFF;
	wr.bind_mw.bind_info.length = WLEN;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	if (ibv_post_send(id->qp, &wr, &bad))
		fail("ibv_post_send(IBV_WR_BIND_MW): %s", strerror(errno));
	want_ok(poll1(id->send_cq, "the bind"), IBV_WC_BIND_MW, "IBV_WR_BIND_MW");
	say("bound type 2 window rkey %#x (allocated as %#x) addr %#" PRIx64 " len %d, region lkey %#x rkey %#x",
	    rkey, mw->rkey, (uint64_t)(uintptr_t)b + WOFF, WLEN, mr->lkey, mr->rkey);

	send_ctl(MSG_WINDOW, rkey, (uintptr_t)b + WOFF, WLEN, 0);
	recv_msg(MSG_DONE, &wc);
	if (send_inv) {
		/* Linux rxe writes the kernel's IB_WC_WITH_INVALIDATE (1 << 2)
		 * into a user CQ's wc_flags (rxe_resp.c do_complete), and the
		 * rxe provider copies the entry as it is (rxe_poll_cq), so the
		 * flag arrives as 1 << 2, which is libibverbs'
		 * IBV_WC_IP_CSUM_OK, not IBV_WC_WITH_INV (1 << 3). Take either;
		 * the rkey must be the window's. */
		if (!(wc.wc_flags & (IBV_WC_WITH_INV | 1 << 2)) || wc.invalidated_rkey != rkey)
			fail("DONE: wc_flags %#x invalidated_rkey %#x, want IBV_WC_WITH_INV and %#x",
			     wc.wc_flags, wc.invalidated_rkey, rkey);
		say("goroce's SEND_WITH_INV invalidated rkey %#x (wc_flags %#x%s)", wc.invalidated_rkey, wc.wc_flags,
		    wc.wc_flags & IBV_WC_WITH_INV ? ": IBV_WC_WITH_INV" : ": rxe's IB_WC_WITH_INVALIDATE, 1 << 2");
	} else {
		if (wc.wc_flags & (IBV_WC_WITH_INV | 1 << 2))
			fail("DONE: a plain SEND came with wc_flags %#x (%#x)", wc.wc_flags, wc.invalidated_rkey);
		struct ibv_send_wr inv = { .wr_id = 2, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED };

		inv.invalidate_rkey = rkey;
		if (ibv_post_send(id->qp, &inv, &bad))
			fail("ibv_post_send(IBV_WR_LOCAL_INV): %s", strerror(errno));
		want_ok(poll1(id->send_cq, "the invalidation"), IBV_WC_LOCAL_INV, "IBV_WR_LOCAL_INV");
		say("invalidated rkey %#x with IBV_WR_LOCAL_INV", rkey);
	}
	check_region(b, "after goroce's WRITE and READ");
	/* goroce answers INVALIDATED, as soon as it arrives, with its WRITE
	 * through the stale rkey, which moves this QP to the error state
	 * (rxe's responder). rxe's completer, a task of its own, may not
	 * have taken goroce's ACK of the SEND by then, and the SEND is then
	 * flushed although goroce received it (seen in the lab). */
	wc = send_ctl_wc(MSG_INVALIDATED, rkey, 0, 0, 0);
	if (wc.status == IBV_WC_WR_FLUSH_ERR)
		say("the INVALIDATED SEND was flushed: the QP went to the error state before its ACK was taken");
	else
		want_ok(wc, IBV_WC_SEND, "SEND");

	wait_disconnect();
	if (ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qia))
		fail("ibv_query_qp: %s", strerror(errno));
	say("qp state after goroce's access through the invalidated rkey: %d%s", qa.qp_state,
	    qa.qp_state == IBV_QPS_ERR ? " (IBV_QPS_ERR)" : "");
	check_region(b, "after the access through the invalidated rkey");
}

static void goroce_binds(int send_inv)
{
	struct ibv_mr *src = reg(WLEN, IBV_ACCESS_LOCAL_WRITE), *dst = reg(WLEN, IBV_ACCESS_LOCAL_WRITE);
	uint8_t *s = src->addr, *d = dst->addr;
	struct ibv_wc wc;
	struct msg w = recv_msg(MSG_WINDOW, NULL);

	say("goroce's window: rkey %#x addr %#" PRIx64 " len %" PRIu64, w.rkey, w.addr, w.len);
	if (w.len != WLEN)
		fail("window length %" PRIu64 ", want %d", w.len, WLEN);
	for (size_t i = 0; i < WLEN; i++)
		s[i] = pattern(i);
	want_ok(rdma(IBV_WR_RDMA_WRITE, src, WLEN, w.addr, w.rkey), IBV_WC_RDMA_WRITE, "RDMA WRITE through the window");
	want_ok(rdma(IBV_WR_RDMA_READ, dst, WLEN, w.addr, w.rkey), IBV_WC_RDMA_READ, "RDMA READ through the window");
	if (memcmp(s, d, WLEN))
		fail("the READ through the window returned other bytes than the WRITE wrote");
	say("WRITE and READ of %d bytes through rkey %#x: the bytes came back", WLEN, w.rkey);

	send_ctl(MSG_DONE, 0, 0, 0, send_inv ? w.rkey : 0);
	if (send_inv)
		say("sent DONE as SEND_WITH_INV of rkey %#x", w.rkey);
	recv_msg(MSG_INVALIDATED, NULL);

	memset(s, 0xee, 16);
	wc = rdma(IBV_WR_RDMA_WRITE, src, 16, w.addr, w.rkey);
	say("WRITE through the invalidated rkey %#x: %s (%d)", w.rkey, ibv_wc_status_str(wc.status), wc.status);
	if (wc.status != IBV_WC_REM_ACCESS_ERR)
		fail("WRITE through the invalidated rkey: status %d (%s), want IBV_WC_REM_ACCESS_ERR",
		     wc.status, ibv_wc_status_str(wc.status));
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7480", *binder = NULL, *inv = NULL;
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 8, .max_recv_wr = NRECV,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *listen_id;
	int c;

	while ((c = getopt(argc, argv, "a:p:b:i:")) != -1) {
		switch (c) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'b': binder = optarg; break;
		case 'i': inv = optarg; break;
		default: goto usage;
		}
	}
	if (!addr || !binder || !inv || (strcmp(binder, "rxe") && strcmp(binder, "goroce")) ||
	    (strcmp(inv, "local") && strcmp(inv, "send"))) {
usage:
		fprintf(stderr, "usage: mwpeer -a ADDR [-p PORT] -b rxe|goroce -i local|send\n");
		return 2;
	}
	if (rdma_getaddrinfo(addr, port, &hints, &res))
		fail("rdma_getaddrinfo %s %s: %s", addr, port, strerror(errno));
	if (rdma_create_ep(&listen_id, res, NULL, &attr))
		fail("rdma_create_ep: %s", strerror(errno));
	if (rdma_listen(listen_id, 0))
		fail("rdma_listen: %s", strerror(errno));
	say("listening on %s port %s", addr, port);
	if (rdma_get_request(listen_id, &id))
		fail("rdma_get_request: %s", strerror(errno));
	recv_mr = ibv_reg_mr(id->pd, recv_msgs, sizeof(recv_msgs), IBV_ACCESS_LOCAL_WRITE);
	send_mr = ibv_reg_mr(id->pd, &send_msg, sizeof(send_msg), 0);
	if (!recv_mr || !send_mr)
		fail("ibv_reg_mr: %s", strerror(errno));
	for (int i = 0; i < NRECV; i++)
		post_recv(i);
	if (rdma_accept(id, &cp))
		fail("rdma_accept: %s", strerror(errno));
	say("connected, qp %#x", id->qp->qp_num);

	if (!strcmp(binder, "rxe"))
		rxe_binds(!strcmp(inv, "send"));
	else
		goroce_binds(!strcmp(inv, "send"));
	say("ok");
	rdma_disconnect(id);
	return 0;
}
