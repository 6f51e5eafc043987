/* A software RDMA device for the verbs backend's receive paths where there is no RDMA device
 * (soft_verbs.c): it defines the rdma-core calls verbs.c makes (device list, open, PD, MRs, QP
 * query and modify) and the context's post and poll operations, so that verbs.c, built into a
 * test program without libibverbs, runs against it. One QP is connected to itself: a send lands
 * in its own oldest posted receive, or waits (as an RC sender retries after RNR) until one is
 * posted. Only RC and UC sends are modelled: a UD send without an address handle aborts, as the
 * provider's read through it faults on a NIC, and other types' sends are refused. Entries are
 * checked against the MRs (in the QP's protection domain; receives need local write) as the data
 * moves, not at post, so that an MR deregistered after the post (ibv_dereg_mr succeeds under work
 * requests that name it, as on a NIC) fails a send IBV_WC_LOC_PROT_ERR, and a receive
 * IBV_WC_LOC_PROT_ERR when a message comes (its send IBV_WC_REM_OP_ERR); a message longer than the
 * receive is IBV_WC_LOC_LEN_ERR (its send IBV_WC_REM_INV_REQ_ERR); either takes the QP to error,
 * which flushes every work request, those posted later too (ibv_post_send takes them, as mlx5's
 * does, and they complete IBV_WC_WR_FLUSH_ERR). A send without IBV_SEND_SIGNALED completes only in
 * error (the QPs do not signal every send). A completion into a full CQ overruns it: the CQ is in
 * error and loses it and every later one, and IBV_EVENT_CQ_ERR waits for ibv_get_async_event (which
 * aborts where it would block on a context with no event: nothing would ever raise one). The
 * context's async_fd is readable while an event waits, as rdma-core's, and keeps the flags it was
 * given. Enough for the tests, not a model of a NIC's timing. */
#ifndef NIC_SOFT_VERBS_H
#define NIC_SOFT_VERBS_H

#include <infiniband/verbs.h>

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How many devices ibv_get_device_list reports (1, or 0 for "no device"). */
void soft_verbs_set_devices(int n);
/* The max_msg_sz port 1 reports (1 GiB unless set, as mlx5's). A send longer than that completes
 * IBV_WC_LOC_LEN_ERR and its QP goes to error, as on a NIC. */
void soft_verbs_set_max_msg(uint32_t bytes);
/* The on-demand paging caps ibv_query_device_ex reports (none unless set: general_caps and the
 * RC and UC transports' IBV_ODP_SUPPORT_* bits). ibv_reg_mr refuses IBV_ACCESS_ON_DEMAND without
 * IBV_ODP_SUPPORT, and IBV_ACCESS_REMOTE_WRITE without IBV_ACCESS_LOCAL_WRITE, with EINVAL. */
void soft_verbs_set_odp(uint64_t general, uint32_t rc, uint32_t uc);
/* A CQ of 256 completions, or of cqe (1 to 256). */
struct ibv_cq *soft_verbs_cq(struct ibv_context *ctx);
struct ibv_cq *soft_verbs_cq_depth(struct ibv_context *ctx, int cqe);
/* Whether a completion found cq full (and was lost, with every later one). */
bool soft_verbs_cq_overrun(struct ibv_cq *cq);
/* What a NIC does to a QP it can no longer serve: the QP goes to error (flushing its work
 * requests) and IBV_EVENT_QP_FATAL is raised. */
void soft_verbs_qp_fatal(struct ibv_qp *qp);
/* An asynchronous event of type about qp raised, nothing else done: a QP event the application
 * reads (IBV_EVENT_COMM_EST, IBV_EVENT_QP_LAST_WQE_REACHED, ...). */
void soft_verbs_qp_event(struct ibv_qp *qp, enum ibv_event_type type);
/* A QP in RESET, with one receive entry per work request. */
struct ibv_qp *soft_verbs_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                             enum ibv_qp_type type, uint32_t max_recv_wr, struct ibv_srq *srq);
/* What ibv_query_qp reports as the QP's max_send_sge (8 unless set: the device's max_sge), as a
 * QP created with fewer send entries than the device takes. */
void soft_verbs_qp_send_sge(struct ibv_qp *qp, uint32_t max_send_sge);
/* The sends qp's send queue holds (256 unless set, 1 to 256), waiting ones included: past that
 * ibv_post_send fails ENOMEM, as a provider's does on a full send queue. */
void soft_verbs_qp_send_wr(struct ibv_qp *qp, uint32_t max_send_wr);
/* Receives posted and not yet taken; sends waiting for one. */
unsigned soft_verbs_rq_posted(struct ibv_qp *qp);
unsigned soft_verbs_sends_waiting(struct ibv_qp *qp);
/* What a peer's RDMA write with immediate does at this QP: takes the oldest posted receive and
 * completes it IBV_WC_RECV_RDMA_WITH_IMM, nothing written into it. false when none is posted. */
bool soft_verbs_write_with_imm(struct ibv_qp *qp, uint32_t len);
/* The access flags the live MR of lkey was registered with (ibv_reg_mr's), or -1 for none. */
int soft_verbs_mr_access(uint32_t lkey);
/* Run by ibv_dereg_mr while set, before the MR goes: a test's way in between a
 * deregistration's checks and the MR's end. */
void soft_verbs_on_dereg(void (*hook)(void));
/* Frees a CQ or QP made above. */
void soft_verbs_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
