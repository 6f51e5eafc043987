/* Marks a definition that leaves the library. Everything else is compiled hidden
 * (-fvisibility=hidden), and a marked name leaves only when the library's version script lists
 * it too (alloc/api/exports.map; regcache/dpdk/dpdk.map and regcache/verbs/verbs.map for the
 * plugins): the map is the one export list, and tests/exports.sh fails when the two disagree. */
#ifndef NIC_EXPORT_H
#define NIC_EXPORT_H

#define NIC_EXPORT __attribute__((visibility("default")))

#endif
