/* The verbs (rdma-core) backend's own API, exported by libnicmalloc-verbs.so. A program reaches
 * it by linking that library or with dlsym on the handle of the loaded plugin.
 *
 * The backend opens one device (NICMALLOC_VERBS_DEVICE, else the first) and one protection
 * domain; every chunk is one ibv_reg_mr in it. The application creates its queue pairs on that
 * device and PD (nic_verbs_context, nic_verbs_pd), connects them as it likes, and hands each to
 * nic_verbs_endpoint: posts become one signaled IBV_WR_SEND with the SG list, refused with
 * -EMSGSIZE when longer than the least max_msg_sz of the device's ports (caps.max_message): a NIC
 * completes a longer one IBV_WC_LOC_LEN_ERR and takes its QP to the error state. */
#ifndef NIC_VERBS_H
#define NIC_VERBS_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_context;
struct ibv_pd;
struct ibv_qp;
struct ibv_cq;

/* The device and protection domain the registrations live in: QPs must share this PD. */
struct ibv_context *nic_verbs_context(struct nic_backend *b);
struct ibv_pd *nic_verbs_pd(struct nic_backend *b);

/* An endpoint over the application's QP. send_cq is the QP's send CQ (NULL: qp->send_cq) and
 * must carry only nicmalloc's posts: poll() takes every completion it finds there, and one that
 * names no post of nicmalloc's (the application's own signaled work request) is dropped, said
 * once and counted among the endpoint API errors. Every post is signaled, so the backend counts
 * what can complete on each CQ (its sends in flight, the receives it reserved) against the CQ's
 * cqe, several endpoints sharing it or not: a post past that is refused with -EAGAIN, nothing
 * posted and no completion, as one past a full send queue (poll and post it again), and receiving
 * posts no more buffers than the receive CQ has room for
 * (-ENOSPC when it has none), so that nicmalloc never overruns a CQ. The context's asynchronous
 * events stay the application's (its QPs' COMM_EST, SRQ_LIMIT_REACHED, port events...): nicmalloc
 * neither reads them nor changes the descriptor's flags, and a QP in error shows as its posts' and
 * receives' completions in error (verbs_completion_errors, each status said once). Opened under
 * NICMALLOC_VERBS_ASYNC_EVENTS=1 (nic_plugin_settings.verbs_async_events), the events are
 * nicmalloc's: poll() reads every one without waiting (poll(2) first), says a CQ or QP in error or
 * a failed device once, and drops the rest. NULL with
 * errno EINVAL (no QP, or a QP outside nic_verbs_pd), EOPNOTSUPP (a QP type other than RC and
 * UC: a post is a bare send, with no address handle or remote QP number; said once, the public
 * constructor counts it), or ENOMEM. */
struct nic_endpoint *nic_verbs_endpoint(struct nic_backend *b, struct ibv_qp *qp,
                                        struct ibv_cq *send_cq);
/* 0, or -EBUSY while posts on it are in flight, or while it receives and a receive buffer is
 * out with the program (held) or still posted, or its receiver has yet to hear something (the
 * end, say, after a buffer given back could not be posted again: poll() tells it), or is
 * hearing it. The QP and CQs stay the application's; but a receiving endpoint's QP is moved to
 * the error state at the first close, since only that makes the NIC give posted receive
 * buffers back (flushed: poll() reaps them, receiving ends with -ECANCELED, and close then
 * succeeds). */
int nic_verbs_endpoint_close(struct nic_backend *b, struct nic_endpoint *ep);

/* Receiving (the backend's endpoint_receive): the receiver is called from poll() only, on one
 * thread at a time per endpoint, in the order the messages came. NIC_VERBS_RX_BUFS buffers of
 * NIC_VERBS_RX_BUF_BYTES (verbs_rx.h; fewer when the receive queue is shorter), carved
 * page-aligned from one dataplane block, are posted on the QP's receive queue; a longer message
 * ends receiving (-EMSGSIZE). The QP's receive CQ must carry only nicmalloc's receives, as the
 * send CQ only its sends (poll() takes every completion it finds there), and must not be a send
 * CQ of an endpoint. Refused: a QP on a shared receive queue (-EOPNOTSUPP), types other than RC
 * and UC (-EOPNOTSUPP), a QP in RESET (-EINVAL: post receives from INIT on) or in error
 * (-ENOTCONN). The block comes from libnicmalloc (safety/endpoint_verbs.c hands this over): alloc
 * returns dataplane memory with the lkey and handle of the registration that covers it (its
 * chunk's, which has local write), or NULL; free gives it back. Without it, -EOPNOTSUPP. */
struct nic_verbs_rx_memory {
  void *(*alloc)(size_t len, size_t align, uint32_t *lkey, uint64_t *handle);
  void (*free)(void *block);
};
void nic_verbs_set_rx_memory(struct nic_backend *b, const struct nic_verbs_rx_memory *m);

/* On-demand paging for later registrations (also NICMALLOC_VERBS_ODP=1): the NIC faults pages
 * in instead of the kernel pinning them at ibv_reg_mr, for each registration whose every use the
 * device reports RC ODP for (sends; receives for one with local write, which receive buffers
 * are carved from; remote reads and writes for one with those rights); the others are pinned.
 * While on, or while an MR pages on demand, a UC queue pair is refused as an endpoint
 * (EOPNOTSUPP) unless the device reports UC ODP for sends and receives (mlx5 does not). 0,
 * -EOPNOTSUPP when the device does not report ODP for RC sends, or -EBUSY to turn it on while a
 * UC endpoint is open on such a device, or to turn it off where the backend opened with it on a
 * device whose RC ODP covers sends, receives, reads and writes: every MR then follows the
 * address (caps.pages_follow), and the heap gives pages back under them. */
int nic_verbs_set_odp(struct nic_backend *b, bool on);

/* ---- Pure mappings, no device needed (the tests run them everywhere). ---- */

/* IBV_ACCESS_* flags for NIC_ACCESS_* bits; -EINVAL for unknown bits. REMOTE_WRITE brings
 * LOCAL_WRITE with it, as verbs requires. */
int nic_verbs_access_flags(unsigned nic_access, bool odp);
/* The rkey a registration reports: the MR's only when remote access was asked for, else 0. */
uint32_t nic_verbs_exposed_rkey(unsigned nic_access, uint32_t mr_rkey);
/* Completion status for an enum ibv_wc_status: 0, -EFAULT (local protection: the SGE is not
 * covered by its lkey), -ECANCELED (flushed: the QP went to error before this ran),
 * -ETIMEDOUT (retries exhausted), -EACCES (remote access), -EMSGSIZE (length: the local one, or
 * IBV_WC_REM_INV_REQ_ERR, the peer's NAK of a send longer than its posted receive), else -EIO. */
int nic_verbs_wc_errno(int wc_status);

#ifdef __cplusplus
}
#endif
#endif
