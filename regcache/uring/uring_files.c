/* The ring's file table: each endpoint's socket is registered in it, and sends name the slot
 * (IOSQE_FIXED_FILE), not the descriptor. The ring then holds its own reference to the socket:
 * a program that closes the descriptor while posts are in flight, and gets the same number for
 * another socket, never has the endpoint's bytes sent on that one. The socket itself stays
 * open until the endpoint is destroyed. */
#define _GNU_SOURCE
#include "uring_internal.h"

#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MAX_FILES 16384u /* endpoints open at once; the kernel caps a table at RLIMIT_NOFILE */

void nic_uring_files_init(struct uring_backend *ub) {
  struct rlimit rl;
  uint32_t n = MAX_FILES;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < n) n = (uint32_t)rl.rlim_cur;
  n &= ~63u;
  ub->files_map = n ? calloc(n / 64, sizeof *ub->files_map) : NULL;
  int rc = ub->files_map ? io_uring_register_files_sparse(&ub->ring, n) : -ENOMEM;
  if (rc < 0) {
    free(ub->files_map);
    ub->files_map = NULL;
    nic_log_warn("uring backend: no file table (%s): sends name descriptors, so a socket closed "
                 "with posts in flight and its number reused would get their bytes",
                 strerror(-rc));
    return;
  }
  for (uint32_t i = 0; i < n / 64; i++)
    ub->files_map[i] = ~0ull;
  ub->nfiles = n;
}

void nic_uring_files_fini(struct uring_backend *ub) {
  free(ub->files_map); /* the table goes with the ring */
  ub->files_map = NULL;
  ub->nfiles = 0;
}

int nic_uring_file_add_locked(struct uring_backend *ub, int fd) {
  if (!ub->nfiles) return -1;
  for (uint32_t w = 0; w < ub->nfiles / 64; w++) {
    if (!ub->files_map[w]) continue;
    int slot = (int)(w * 64 + (uint32_t)__builtin_ctzll(ub->files_map[w]));
    int rc = io_uring_register_files_update(&ub->ring, (unsigned)slot, &fd, 1);
    if (rc < 0) return rc;
    ub->files_map[w] &= ~(1ull << (slot % 64));
    return slot;
  }
  return -EMFILE;
}

void nic_uring_file_remove_locked(struct uring_backend *ub, int slot) {
  if (slot < 0) return;
  int none = -1; /* drops the ring's reference: the socket closes if the program closed it */
  io_uring_register_files_update(&ub->ring, (unsigned)slot, &none, 1);
  ub->files_map[slot / 64] |= 1ull << (slot % 64);
}
