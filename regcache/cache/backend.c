/* Choosing and opening the process-wide backend (NICMALLOC_BACKEND). verbs and dpdk live in
 * plugins loaded only when chosen, so that preloading the allocator never drags rdma-core or
 * DPDK (and their constructors) into every program. */
#define _GNU_SOURCE
#include "backend.h"
#include "backoff.h"
#include "chunk_reg.h"
#include "forklock.h"

#include "lasting_thread.h"
#include "log.h"
#include "nocancel.h"
#include "open_fds.h"
#include "plugin_dir.h"
#include "plugin_env.h"
#include "plugin_host.h"
#include "settings.h"
#include "thread.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

typedef struct nic_backend *(*open_fn)(void);

/* Built-in backends register themselves (NIC_BACKEND_BUILTIN); one left out of the build (no
 * liburing, say) is then simply not available. */
NIC_REGISTRY_DECLARE(struct nic_backend_builtin, nic_backends);

static struct nic_backend *open_builtin(const char *name) {
  NIC_REGISTRY_EACH(struct nic_backend_builtin, nic_backends, e) {
    if (!strcmp(e->name, name)) return e->open();
  }
  errno = ENOSYS;
  return NULL;
}

static const char *const kind_names[NIC_BACKEND_KINDS] = {"sim", "uring", "verbs", "dpdk"};

/* Why a plugin kind's library could not be loaded, the path tried and the loader's reason, for
 * the messages that say the backend cannot run (nic_backend_refused_why): else they could only
 * give errno's "No such file or directory" and leave the reader to suspect the backend's own
 * needs. Kept from the first failure; written under the lock, read after taking it. */
#define PLUGIN_KINDS (NIC_BACKEND_KINDS - NIC_BACKEND_VERBS)
#define PLUGIN_PATH_MAX (PATH_MAX + 64)
#define LOADER_REASON_MAX 512
static char unloadable[PLUGIN_KINDS][PLUGIN_PATH_MAX + LOADER_REASON_MAX + 32];
static bool unloadable_said[PLUGIN_KINDS];

static void note_unloadable(enum nic_backend_kind kind, const char *path, const char *reason) {
  const unsigned k = kind - NIC_BACKEND_VERBS;
  if (unloadable_said[k]) return;
  /* The loader's message starts with the path when the file itself is missing or unreadable. */
  const size_t len = strlen(path);
  if (!strncmp(reason, path, len) && !strncmp(reason + len, ": ", 2)) reason += len + 2;
  snprintf(unloadable[k], sizeof unloadable[k], "%s cannot be loaded: %s", path, reason);
  __atomic_store_n(&unloadable_said[k], true, __ATOMIC_RELEASE);
  nic_log_info("backend %s: %s", kind_names[kind], unloadable[k]);
}

/* Plugins sit next to libnicmalloc.so's real file (plugin_dir.h), else along the library path.
 * The handle, or NULL with errno. Loaded once: a later load (the open after an early call,
 * nic_backend_plugin_symbol) finds the same copy. Under the lock. */
static void *load_plugin(enum nic_backend_kind kind) {
  const char *name = kind_names[kind];
  static char path[PLUGIN_PATH_MAX], first_failure[LOADER_REASON_MAX];
  const char *dir = nic_plugin_dir();
  const size_t dir_len = strlen(dir);
  if (dir_len + strlen(name) + 40 > sizeof path) {
    errno = ENAMETOOLONG; /* the start fails with this, not with whatever errno held */
    return NULL;
  }
  snprintf(path, sizeof path, "%slibnicmalloc-%s.so", dir, name);
  nic_plugin_env_mark();
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const char *loaded = path;
  if (!handle) {
    const char *err = dlerror(); /* the next dlopen replaces it */
    snprintf(first_failure, sizeof first_failure, "%s", err ? err : "unknown reason");
    if (dir_len) handle = dlopen(loaded = path + dir_len, RTLD_NOW | RTLD_LOCAL); /* library path */
  }
  if (!handle) {
    note_unloadable(kind, path, first_failure);
    errno = ENOENT;
    return NULL;
  }
  const unsigned *abi = (const unsigned *)dlsym(handle, "nic_backend_abi");
  if (!abi || *abi != NIC_BACKEND_ABI) {
    snprintf(first_failure, sizeof first_failure,
             "built for another version of nicmalloc (backend ABI %u, this library's %u)",
             abi ? *abi : 0, NIC_BACKEND_ABI);
    note_unloadable(kind, loaded, first_failure);
    dlclose(handle);
    errno = ENOENT;
    return NULL;
  }
  __atomic_store_n(&unloadable_said[kind - NIC_BACKEND_VERBS], false, __ATOMIC_RELEASE);
  const unsigned guarded = nic_plugin_env_guard();
  if (guarded) nic_log_info("backend %s: %u libraries read no environment", name, guarded);
  return handle;
}

static struct nic_backend *open_plugin(enum nic_backend_kind kind) {
  const char *name = kind_names[kind];
  void *handle = load_plugin(kind);
  if (!handle) return NULL;
  char symbol[64];
  snprintf(symbol, sizeof symbol, "nic_backend_%s_settings", name);
  void (*take)(const struct nic_plugin_settings *) =
      (void (*)(const struct nic_plugin_settings *))dlsym(handle, symbol);
  if (take) {
    struct nic_plugin_settings s = {.verbs_device = nic_setting_text(NIC_S_VERBS_DEVICE),
                                    .verbs_odp = nic_setting_bool(NIC_S_VERBS_ODP),
                                    .dpdk_vdev = nic_setting_text(NIC_S_DPDK_VDEV),
                                    .dpdk_eal_args = nic_setting_text(NIC_S_DPDK_EAL_ARGS)};
    take(&s);
  }
  snprintf(symbol, sizeof symbol, "nic_backend_%s_open", name);
  nic_plugin_open_fn fn = (nic_plugin_open_fn)dlsym(handle, symbol);
  if (!fn) errno = ENOSYS;
  return fn ? fn(nic_plugin_host_table()) : NULL;
}

/* A plugin's open, or with symbol set its load only (the backend not opened) and that symbol's
 * address (nic_backend_plugin_symbol). */
struct plugin_open {
  enum nic_backend_kind kind;
  const char *symbol;
  struct nic_backend *b;
  void *sym;
  int err;
};
static void plugin_open_there(void *arg) {
  /* What the loader and the plugin allocate for themselves is bookkeeping: never dataplane
   * memory, whatever NICMALLOC_DP_MIN_SIZE says (DPDK's EAL left 1.7 MB there). */
  NIC_INTERNAL_SCOPE();
  struct plugin_open *o = arg;
  nic_plugin_env_hide();
  errno = 0;
  if (o->symbol) {
    void *handle = load_plugin(o->kind);
    o->sym = handle ? dlsym(handle, o->symbol) : NULL;
    if (handle && !o->sym) errno = ENOSYS;
  } else {
    o->b = open_plugin(o->kind);
  }
  o->err = errno;
  nic_plugin_env_show();
  errno = o->err;
}

/* On the main thread, or on the lasting thread when the caller is another (lasting_thread.h):
 * the plugin's blocks live as long as the process. DPDK's EAL makes its main lcore of the thread
 * that opens it, so a program's other thread is left as it was. */
static void open_plugin_lasting(struct plugin_open *o) {
  if (nic_on_main_thread() || !nic_run_on_lasting_thread(plugin_open_there, o))
    plugin_open_there(o);
  errno = o->err;
}

/* A built-in backend's blocks live as long as the process, whichever thread opens it: kept out
 * of that thread's heap (thread.h, nic_own_thread_create). An open runs under the lock every
 * later registration takes, through code that reads files (DPDK's EAL, rdma-core, the sim's
 * delays): a cancel pending on the opening thread waits until the open is over. What it opens
 * is made close-on-exec (open_fds.h). The threads it starts take none of the program's signals:
 * nicmalloc's own block them (nic_own_thread_create), but DPDK's EAL starts its interrupt thread
 * with the opening thread's mask, where the program's SIGTERM could land (a program that blocks
 * its signals everywhere and takes them with sigwait was ended by it instead); so the open runs
 * with them blocked, but for the faults, which must reach their handlers (EAL's SIGBUS one while
 * it maps hugepages). A plugin's load alone (o->symbol set) runs so too: its libraries'
 * constructors run then. Under the lock. */
static struct nic_backend *open_kind(enum nic_backend_kind kind, struct plugin_open *o) {
  const char *name = kind_names[kind];
  const int cancel = nic_cancel_off();
  sigset_t all, old;
  nic_signals_but_faults(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  static struct nic_fd_set before; /* 8 KiB: not on the program's stack */
  nic_fds_snapshot(&before);
  struct nic_backend *b;
  if (kind > NIC_BACKEND_URING) {
    open_plugin_lasting(o);
    b = o->b;
  } else {
    NIC_INTERNAL_SCOPE(); /* off the inline path, which would not see the scope below */
    nic_lifetime_begin();
    b = open_builtin(name);
    nic_lifetime_end();
  }
  const int err = errno;
  const unsigned marked = nic_fds_adopt_new(&before);
  if (marked) nic_log_info("backend %s: %u descriptors it opened made close-on-exec", name, marked);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  nic_cancel_restore(cancel);
  errno = err;
  return b;
}

/* started[] is written once per kind under the lock and read without it. The lock is held while
 * a backend opens (ring, device, EAL, a plugin's dlopen), so that two endpoints of one kind made
 * at once share one backend. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct nic_backend *started[NIC_BACKEND_KINDS];
static int failed[NIC_BACKEND_KINDS]; /* errno of a start that failed: not tried again */
/* A start refused for a shortage that may pass (shortage()): its errno, and when to try again. */
static int short_of[NIC_BACKEND_KINDS];
static struct nic_backoff short_retry[NIC_BACKEND_KINDS];
static uint64_t short_refusals; /* counted in backend_start_refusals */
static unsigned count, mask;
struct nic_backend *nic_backend_only_one; /* while count is 1, and not in a child of fork */
static struct nic_backend *deflt;
static bool chosen;
static int epfd = -1;   /* nic_backends_event_fd's set, made on first use */
static int joined = -1; /* nic_backends_event_fd_join's */
#define EVENT_FD_UNKNOWN INT_MIN
static int event_fd_known = EVENT_FD_UNKNOWN; /* its answer, until another backend starts */
static unsigned in_set;                       /* kinds whose event descriptor is in the set */
static bool parents; /* a child of fork made while a backend opened: none can be its own */
static unsigned parents_kinds;   /* plugin kinds the parent started: not started again here */
static int parents_default = -1; /* the parent's default kind, when the child may start it */
static unsigned generation;      /* forks whose child forgot its parent's backends, down to here */
static bool opening;             /* a backend is being opened, and the lock is held for it */
static char names[1u << NIC_BACKEND_KINDS][32];

/* Ticks nic_event_fd's set for a backend without an event descriptor that started after the set
 * was handed out (ticker_start_locked); -1 until then. */
static int ticker = -1;
#define TICK_NS (1000 * 1000) /* as often as nic_wait polls such a backend (safety/wait.c) */

/* A program asleep on the set would never wake for that backend's completions: from now on the
 * set polls readable every millisecond, so that the program polls it as nic_wait does, and each
 * nic_poll reads the ticks (nic_backends_poll). A caller of nic_event_fd from now on is told
 * -ENOSYS, as when that backend was there first. */
static void ticker_start_locked(const struct nic_backend *b) {
  if (ticker >= 0) return;
  const int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  const struct itimerspec every = {.it_interval = {0, TICK_NS}, .it_value = {0, TICK_NS}};
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (fd < 0 || timerfd_settime(fd, 0, &every, NULL) != 0 ||
      epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    nic_log_error("backend %s has no event descriptor, and nic_event_fd's set, handed out before "
                  "it started, cannot be made to tick for it (%s): a program asleep on that set "
                  "is not woken for its completions; nic_wait polls it",
                  b->name, strerror(errno));
    if (fd >= 0) nic_close_nocancel(fd); /* under the backends lock: no cancellation point */
    return;
  }
  nic_fds_adopt(fd);
  __atomic_store_n(&ticker, fd, __ATOMIC_RELEASE);
  nic_log_warn("backend %s has no event descriptor: nic_event_fd's set, handed out before it "
               "started, now polls readable every millisecond so that a program waiting on it "
               "polls %s too; nic_event_fd answers -ENOSYS from now on",
               b->name, b->name);
}

static void epoll_add_locked(unsigned kind, struct nic_backend *b) {
  const int fd = b->event_fd ? b->event_fd(b) : -ENOSYS;
  if (fd < 0) {
    ticker_start_locked(b);
    return;
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = b};
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
    in_set |= 1u << kind;
  else
    nic_log_warn_once("backend %s: its event descriptor cannot join nic_event_fd's set (%s)",
                      b->name, strerror(errno));
}

static void epoll_join_locked(void) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (joined >= 0 && epfd >= 0 && epoll_ctl(epfd, EPOLL_CTL_ADD, joined, &ev) != 0)
    nic_log_warn_once("backend: a descriptor cannot join nic_event_fd's set (%s)", strerror(errno));
}

void nic_backends_event_fd_join(int fd) {
  pthread_mutex_lock(&lock);
  if (joined < 0 && fd >= 0) {
    joined = fd;
    nic_fds_adopt(fd); /* closed in fork children with the set */
    epoll_join_locked();
  }
  pthread_mutex_unlock(&lock);
}

/* What the kernel answers when it is short of something for now (descriptors, memory, threads):
 * a backend refused for it may well start later, as chunks refused so are tried again. */
static bool shortage(int err) {
  return err == EMFILE || err == ENFILE || err == ENOMEM || err == EAGAIN;
}

static struct nic_backend *start_locked(enum nic_backend_kind kind) {
  if (started[kind]) return started[kind];
  if (failed[kind]) {
    errno = failed[kind];
    return NULL;
  }
  if (nic_backoff_waiting(&short_retry[kind])) {
    errno = short_of[kind];
    return NULL;
  }
  __atomic_store_n(&opening, true, __ATOMIC_RELEASE);
  struct plugin_open o = {.kind = kind};
  struct nic_backend *b = open_kind(kind, &o);
  __atomic_store_n(&opening, false, __ATOMIC_RELEASE);
  if (!b && shortage(errno)) {
    short_of[kind] = errno;
    nic_backoff_refused(&short_retry[kind]);
    __atomic_add_fetch(&short_refusals, 1, __ATOMIC_RELAXED);
    static int said[NIC_BACKEND_KINDS];
    if (!said[kind]++)
      nic_log_warn(NIC_BACKEND_SHORT_FMT " (counted in backend_start_refusals)", kind_names[kind],
                   strerror(short_of[kind]));
    errno = short_of[kind];
    return NULL;
  }
  if (!b) {
    failed[kind] = errno ? errno : ENODEV;
    errno = failed[kind];
    return NULL;
  }
  nic_backoff_succeeded(&short_retry[kind]);
  const unsigned now = mask | 1u << kind;
  char *n = names[now];
  for (unsigned k = 0, at = 0; k < NIC_BACKEND_KINDS; k++)
    if (now & 1u << k)
      at += (unsigned)snprintf(n + at, sizeof names[0] - at, "%s%s", at ? "+" : "", kind_names[k]);
  if (epfd >= 0) epoll_add_locked(kind, b);
  __atomic_store_n(&event_fd_known, EVENT_FD_UNKNOWN, __ATOMIC_RELEASE);
  __atomic_store_n(&started[kind], b, __ATOMIC_RELEASE);
  __atomic_store_n(&mask, now, __ATOMIC_RELEASE);
  __atomic_store_n(&nic_backend_only_one, count ? NULL : b, __ATOMIC_RELEASE);
  __atomic_add_fetch(&count, 1, __ATOMIC_RELEASE);
  return b;
}

/* NICMALLOC_BACKEND's choices (auto|sim|...) as kinds, -1 for auto; a name the table does not
 * list was refused there, with a warning: auto. Under auto, the kinds tried in turn. */
static const int named[] = {-1, NIC_BACKEND_SIM, NIC_BACKEND_URING, NIC_BACKEND_VERBS,
                            NIC_BACKEND_DPDK};
static const enum nic_backend_kind order[] = {NIC_BACKEND_VERBS, NIC_BACKEND_URING,
                                              NIC_BACKEND_SIM};

/* Under the lock: kind refused for a shortage and to be tried again. */
static int short_of_locked(int kind) {
  return kind >= 0 && !started[kind] && !failed[kind] ? short_of[kind] : 0;
}

/* Whether the kernel lists an RDMA device (a uverbs entry of /sys/class/infiniband_verbs, where
 * libibverbs finds them). Auto tries verbs only then: elsewhere its open can only fail, and
 * rdma-core, once loaded, tells the program's stderr what it thinks of the process (libibverbs:
 * "Warning: RLIMIT_MEMLOCK is 16384 bytes", for a user under 32 KiB) though the program named no
 * backend. getdents64 into a stack buffer: under the backends' lock, no malloc. */
static bool rdma_device_listed(void) {
  const int dir =
      nic_open_nocancel("/sys/class/infiniband_verbs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  bool found = false;
  char buf[2048];
  for (long got; !found && (got = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0;)
    for (long at = 0; !found && at < got; at += ((const struct dirent64 *)(buf + at))->d_reclen)
      found = !strncmp(((const struct dirent64 *)(buf + at))->d_name, "uverbs", 6);
  nic_close_nocancel(dir);
  return found;
}

/* What pick_locked says of a kind, once each: while a shortage leaves no default, every call
 * that needs one chooses again (22 lines in a second of retries). Under the lock. */
static bool said_refused[NIC_BACKEND_KINDS], said_unavailable[NIC_BACKEND_KINDS], said_no_rdma;

/* *again: no default now, for a shortage that may pass; choose again on a later call. */
static struct nic_backend *pick_locked(bool *again) {
  const int want = named[nic_setting_choice(NIC_S_BACKEND)];
  struct nic_backend *b = NULL;
  if (want >= 0) {
    if ((b = start_locked((enum nic_backend_kind)want))) return b;
    /* The program asked for this one: none meanwhile, rather than another for good. */
    if (short_of_locked(want)) {
      *again = true;
      return NULL;
    }
    const char *why = nic_backend_refused_why((enum nic_backend_kind)want);
    if (!said_refused[want]) {
      said_refused[want] = true;
      nic_log_warn("backend %s cannot run here (%s); choosing automatically", kind_names[want],
                   why ? why : strerror(errno));
    }
  }
  /* An endpoint's constructor started one already: the program uses that one. */
  for (unsigned k = 0; k < NIC_BACKEND_KINDS && !b; k++)
    b = started[k];
  /* A child of fork goes on with the kind its parent used, as the program chose it there. */
  if (!b && parents_default >= 0) b = start_locked((enum nic_backend_kind)parents_default);
  for (size_t i = 0; i < sizeof order / sizeof order[0] && !b; i++) {
    if (order[i] == NIC_BACKEND_VERBS && !rdma_device_listed()) {
      if (!said_no_rdma) nic_log_info("backend verbs not tried: the kernel lists no RDMA device");
      said_no_rdma = true;
      continue;
    }
    b = start_locked(order[i]);
    if (!b && !said_unavailable[order[i]])
      nic_log_info("backend %s not available: %s", kind_names[order[i]],
                   nic_backend_refused_why(order[i]) ? nic_backend_refused_why(order[i])
                                                     : strerror(errno));
    said_unavailable[order[i]] |= !b;
    *again |= !b && short_of_locked((int)order[i]);
  }
  if (!b && !*again) nic_log_warn("no registration backend could be opened");
  for (size_t i = 0; i < sizeof order / sizeof order[0] && !b && *again; i++)
    if (short_of_locked((int)order[i])) {
      nic_log_warn_once("no registration backend can start for now: " NIC_BACKEND_SHORT_FMT,
                        kind_names[order[i]], strerror(short_of[order[i]]));
      break;
    }
  return b;
}

int nic_backend_short_of(enum nic_backend_kind kind) {
  if ((unsigned)kind >= NIC_BACKEND_KINDS || parents) return 0;
  pthread_mutex_lock(&lock);
  const int err = short_of_locked((int)kind);
  pthread_mutex_unlock(&lock);
  return err;
}

int nic_backend_default_short_of(const char **name) {
  if (parents) return 0;
  pthread_mutex_lock(&lock);
  const int want = named[nic_setting_choice(NIC_S_BACKEND)];
  int kind = want, err = chosen ? 0 : short_of_locked(want);
  for (size_t i = 0; i < sizeof order / sizeof order[0] && !chosen && want < 0 && !err; i++)
    err = short_of_locked(kind = (int)order[i]);
  pthread_mutex_unlock(&lock);
  if (err && name) *name = kind_names[kind];
  return err;
}

/* Once: the default never changes (the per-backend tables and the chunks' own registrations
 * are made against it). */
static void choose_locked(void) {
  bool again = false;
  __atomic_store_n(&deflt, pick_locked(&again), __ATOMIC_RELEASE);
  if (deflt || !again) __atomic_store_n(&chosen, true, __ATOMIC_RELEASE);
}

/* Not held across fork, only made anew in the child (forklock.h): its holder opens backends,
 * taking the allocator's and the registration cache's locks, and the default is chosen under
 * the cache's lock (by a first registration), so it fits nowhere in the order. */
static void reset_in_child(void) {
  pthread_mutex_init(&lock, NULL);
}

/* The parent's backends are not the child's: their rings, queues and threads stay with the
 * parent, and the child has copies of their structures only. The child forgets them (the
 * registrations made with them too: chunk_reg.c, rcache.c) and opens its own on first use, as
 * a fresh process would: the sim and io_uring, whose every open makes new state. A plugin's
 * kind the parent started is not opened again: DPDK's EAL runs once per process and keeps its
 * state in the plugin, and verbs' plugin state is the parent's device context. An open under
 * way at fork leaves the child the opening thread's half-made state (DPDK's EAL half set up,
 * the dynamic loader inside a plugin's dlopen), on which an open of its own aborted, crashed
 * or fell back to another backend: that child keeps none, as before any open could be its
 * own. */
static void after_fork_child(void) {
  const bool half_open = __atomic_load_n(&opening, __ATOMIC_ACQUIRE);
  bool any = half_open || __atomic_load_n(&count, __ATOMIC_ACQUIRE) != 0;
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++)
    any |= __atomic_load_n(&started[k], __ATOMIC_ACQUIRE) != NULL;
  /* The set (nic_thread_event_fd's, made before any backend opened) is one epoll instance with
   * the parent's: the child's backends joining it woke the parent's threads, and the parent's the
   * child's. */
  any |= epfd >= 0 || joined >= 0;
  nic_backend_only_one = NULL;
  if (!any) return;
  /* The child's copies only: the parent's backends keep theirs (open_fds.h). */
  nic_fds_close_adopted();
  epfd = -1;
  in_set = 0;
  ticker = -1;
  joined = -1; /* the layer above's descriptor was one of the adopted */
  nic_chunk_regs_forget_parents();
  if (half_open) {
    parents = true;
    return;
  }
  /* The default, or the one the parent's first choice would have taken (pick_locked). */
  unsigned default_kind = nic_backend_kind_of(deflt);
  for (unsigned k = 0; k < NIC_BACKEND_KINDS && !deflt && default_kind == NIC_BACKEND_KINDS; k++)
    if (started[k]) default_kind = k;
  parents_default =
      default_kind == NIC_BACKEND_SIM || default_kind == NIC_BACKEND_URING ? (int)default_kind : -1;
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
    if (started[k] && k != NIC_BACKEND_SIM && k != NIC_BACKEND_URING) {
      failed[k] = ENODEV;
      parents_kinds |= 1u << k;
    }
    started[k] = NULL;
  }
  count = mask = 0;
  deflt = NULL;
  chosen = false;
  event_fd_known = EVENT_FD_UNKNOWN;
  generation++;
}
NIC_FORKLOCK_CUSTOM(backends, NIC_FORK_BACKEND, NULL, NULL, reset_in_child, after_fork_child);

/* Apart, so that the fast path below (every post and entry asks) is two loads and a branch. */
__attribute__((noinline, cold)) static struct nic_backend *choose_now(void) {
  if (parents) return NULL;
  if (__atomic_load_n(&chosen, __ATOMIC_ACQUIRE)) return deflt; /* none could be opened */
  pthread_mutex_lock(&lock);
  if (!chosen) choose_locked();
  struct nic_backend *b = deflt;
  pthread_mutex_unlock(&lock);
  return b;
}

struct nic_backend *nic_backend_active(void) {
  struct nic_backend *b = __atomic_load_n(&deflt, __ATOMIC_ACQUIRE);
  return __builtin_expect(b && !parents, 1) ? b : choose_now();
}

struct nic_backend *nic_backend_if_open(void) {
  return parents ? NULL : __atomic_load_n(&deflt, __ATOMIC_ACQUIRE);
}

struct nic_backend *nic_backend_start(enum nic_backend_kind kind) {
  if ((unsigned)kind >= NIC_BACKEND_KINDS) {
    errno = EINVAL;
    return NULL;
  }
  if (parents) {
    errno = ENODEV;
    return NULL;
  }
  struct nic_backend *b = __atomic_load_n(&started[kind], __ATOMIC_ACQUIRE);
  if (b) return b;
  pthread_mutex_lock(&lock);
  b = start_locked(kind);
  const int err = errno;
  pthread_mutex_unlock(&lock);
  errno = err;
  return b;
}

void *nic_backend_plugin_symbol(enum nic_backend_kind kind, const char *symbol) {
  if (kind <= NIC_BACKEND_URING || (unsigned)kind >= NIC_BACKEND_KINDS || parents ||
      (parents_kinds >> kind & 1)) {
    errno = ENODEV;
    return NULL;
  }
  pthread_mutex_lock(&lock);
  struct plugin_open o = {.kind = kind, .symbol = symbol};
  __atomic_store_n(&opening, true, __ATOMIC_RELEASE); /* a fork now: the loader half way */
  open_kind(kind, &o);
  __atomic_store_n(&opening, false, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lock);
  errno = o.sym ? 0 : o.err == ENOSYS ? ENOSYS : ENODEV;
  return o.sym;
}

struct nic_backend *nic_backend_started(enum nic_backend_kind kind) {
  return parents || (unsigned)kind >= NIC_BACKEND_KINDS
             ? NULL
             : __atomic_load_n(&started[kind], __ATOMIC_ACQUIRE);
}

unsigned nic_backend_count(void) {
  return parents ? 0 : __atomic_load_n(&count, __ATOMIC_ACQUIRE);
}

unsigned nic_backend_kind_of(const struct nic_backend *b) {
  unsigned k = 0;
  while (k < NIC_BACKEND_KINDS && (!b || __atomic_load_n(&started[k], __ATOMIC_ACQUIRE) != b))
    k++;
  return k;
}

/* In nicmalloc's own scope, as every backend call (backend_calls.c): polls come from the program's
 * threads (nic_poll, fences that wait), maybe inside its dataplane scopes. */
int nic_backends_poll(int max) {
  if (parents) return 0;
  NIC_INTERNAL_SCOPE();
  const int ticks = __atomic_load_n(&ticker, __ATOMIC_ACQUIRE);
  if (__builtin_expect(ticks >= 0, 0)) { /* else the set would stay readable */
    uint64_t expired; /* no cancellation point: nic_poll acts on no cancel (nocancel.h) */
    if (nic_read_nocancel(ticks, &expired, sizeof expired) < 0) expired = 0;
  }
  int ran = 0;
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
    struct nic_backend *b = __atomic_load_n(&started[k], __ATOMIC_ACQUIRE);
    if (!b) continue;
    ran += b->poll(b, max > 0 ? max - ran : max);
    if (max > 0 && ran >= max) break;
  }
  return ran;
}

/* The set, made on first use with the started backends in it (those that start later join it
 * in start_locked), or -errno. */
static int event_set_locked(void) {
  if (epfd >= 0) return epfd;
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return -errno;
  nic_fds_adopt(epfd);
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++)
    if (started[k]) epoll_add_locked(k, started[k]);
  epoll_join_locked();
  return epfd;
}

int nic_backends_event_fd(void) {
  if (parents || !__atomic_load_n(&count, __ATOMIC_ACQUIRE)) return -ENODEV;
  /* nic_wait asks on every call: the answer stands until another backend starts. */
  const int known = __atomic_load_n(&event_fd_known, __ATOMIC_ACQUIRE);
  if (known != EVENT_FD_UNKNOWN) return known;
  pthread_mutex_lock(&lock);
  /* -ENOSYS, a backend without a descriptor, stands; a shortage (a descriptor, the set, that
   * could not be made now) is said as such and not remembered: the next call tries again. */
  int rc = 0;
  for (unsigned k = 0; k < NIC_BACKEND_KINDS && rc != -ENOSYS; k++) {
    const int fd = !started[k]            ? 0
                   : started[k]->event_fd ? started[k]->event_fd(started[k])
                                          : -ENOSYS;
    if (fd < 0 && rc >= 0) rc = fd;
    if (fd == -ENOSYS) rc = fd;
  }
  if (!rc) rc = event_set_locked();
  /* One that had none when it joined the set (the ticker wakes for it) has one now. */
  for (unsigned k = 0; k < NIC_BACKEND_KINDS && rc >= 0; k++)
    if (started[k] && !(in_set >> k & 1)) epoll_add_locked(k, started[k]);
  if (rc == epfd || rc == -ENOSYS) __atomic_store_n(&event_fd_known, rc, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lock);
  return rc;
}

int nic_backends_event_set(void) {
  if (parents) return -ENODEV;
  pthread_mutex_lock(&lock);
  const int rc = event_set_locked();
  pthread_mutex_unlock(&lock);
  return rc;
}

uint64_t nic_backend_start_refusals(void) {
  return __atomic_load_n(&short_refusals, __ATOMIC_RELAXED);
}

const char *nic_backends_names(void) {
  const unsigned m = parents ? 0 : __atomic_load_n(&mask, __ATOMIC_ACQUIRE);
  return m ? names[m] : "none";
}

const char *nic_backend_missing_why(void) {
  return parents ? "a backend was opening when this process was forked, and the child of fork "
                   "made then neither posts nor polls"
                 : NULL;
}

const char *nic_backend_refused_why(enum nic_backend_kind kind) {
  if ((unsigned)kind >= NIC_BACKEND_KINDS) return NULL;
  if (parents_kinds >> kind & 1)
    return "the parent process started it, and a child of fork leaves it to the parent";
  if (kind >= NIC_BACKEND_VERBS &&
      __atomic_load_n(&unloadable_said[kind - NIC_BACKEND_VERBS], __ATOMIC_ACQUIRE))
    return unloadable[kind - NIC_BACKEND_VERBS];
  return NULL;
}

unsigned nic_backend_generation(void) {
  return __atomic_load_n(&generation, __ATOMIC_RELAXED);
}
