// An RC queue pair connected to itself on port 1, so that a send arrives in its own receive
// queue: what the verbs device tests (test_verbs_backend.cc, test_public_endpoints.cc) talk over.
#ifndef NIC_TEST_VERBS_LOOPBACK_H
#define NIC_TEST_VERBS_LOOPBACK_H

#include <infiniband/verbs.h>

#include <cstring>
#include <string>

// INIT, RTR, RTS; "" or the step that failed, with its error.
inline std::string VerbsConnectToSelf(ibv_context *ctx, ibv_qp *qp) {
  ibv_port_attr port{};
  ibv_gid gid{};
  if (ibv_query_port(ctx, 1, &port)) return "ibv_query_port";
  if (ibv_query_gid(ctx, 1, 0, &gid)) return "ibv_query_gid";
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (int e = ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return std::string("INIT: ") + strerror(e);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = port.active_mtu;
  a.dest_qp_num = qp->qp_num;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = 1;
  a.ah_attr.dlid = port.lid;
  a.ah_attr.is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET; // RoCE (rxe) needs a GRH
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.hop_limit = 1;
  if (int e = ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return std::string("RTR: ") + strerror(e);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7; // a send finding no receive posted is retried for ever: the push-back
  a.max_rd_atomic = 1;
  if (int e = ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    return std::string("RTS: ") + strerror(e);
  return "";
}

#endif
