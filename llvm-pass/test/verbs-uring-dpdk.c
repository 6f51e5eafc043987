// The other default sinks, on stand-in declarations with the real layouts: ibv_post_send follows
// wr->sg_list->addr, a u64 (the pointer travels as an integer); io_uring_prep_send* are static
// inline in liburing.h (a definition in the module, matched by name); rte_pktmbuf_attach_extbuf
// takes the buffer itself; nic_sga_add(sga, p, len) takes p.
// RUN: %clang-nic -O1 -c -o /dev/null -Rpass=nic-dataplane-sites %s 2>&1 | FileCheck %s
#include <stdint.h>
#include <stdlib.h>

struct ibv_qp;
struct ibv_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
struct ibv_send_wr {
  uint64_t wr_id;
  struct ibv_send_wr *next;
  struct ibv_sge *sg_list;
  int num_sge;
};
int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);

struct io_uring_sqe {
  uint64_t addr;
  uint32_t len;
};
static inline void io_uring_prep_send_zc(struct io_uring_sqe *sqe, int fd, const void *buf,
                                         size_t len, int flags, unsigned zc_flags) {
  sqe->addr = (uintptr_t)buf;
  sqe->len = len;
  (void)fd, (void)flags, (void)zc_flags;
}

struct rte_mbuf;
struct rte_mbuf_ext_shared_info;
void rte_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf, uint64_t iova, uint16_t len,
                               struct rte_mbuf_ext_shared_info *shinfo);
struct nic_sga;
int nic_sga_add(struct nic_sga *sga, const void *p, size_t len);

// CHECK-DAG: verbs-uring-dpdk.c:[[@LINE+4]]:{{.*}} malloc -> nic_malloc_site {{.*}} reaches ibv_post_send arg 1
void rdma(struct ibv_qp *qp, size_t n) {
  struct ibv_sge sge[2] = {{0}};
  struct ibv_send_wr wr = {0}, *bad;
  sge[1].addr = (uintptr_t)malloc(n);
  wr.sg_list = sge;
  wr.num_sge = 2;
  ibv_post_send(qp, &wr, &bad);
}
// CHECK-DAG: verbs-uring-dpdk.c:[[@LINE+2]]:{{.*}} malloc -> nic_malloc_site {{.*}} reaches io_uring_prep_send_zc arg 2
void uring(struct io_uring_sqe *sqe, int fd, size_t n) {
  io_uring_prep_send_zc(sqe, fd, malloc(n), n, 0, 0);
}
// CHECK-DAG: verbs-uring-dpdk.c:[[@LINE+2]]:{{.*}} aligned_alloc -> nic_aligned_alloc_site {{.*}} reaches rte_pktmbuf_attach_extbuf arg 1
void dpdk(struct rte_mbuf *m, struct rte_mbuf_ext_shared_info *sh) {
  rte_pktmbuf_attach_extbuf(m, aligned_alloc(4096, 8192), 0, 8192, sh);
}
// CHECK-DAG: verbs-uring-dpdk.c:[[@LINE+2]]:{{.*}} malloc -> nic_malloc_site {{.*}} reaches nic_sga_add arg 1
void sga(struct nic_sga *s, size_t n) {
  nic_sga_add(s, malloc(n), n);
}
