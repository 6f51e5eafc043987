/* espresso: modeled on the espresso two-level logic minimiser (as run in mimalloc-bench), from
 * its published description; not the original program. Its allocation pattern: cubes are small
 * blocks (an input part and an output part), covers are arrays of cubes grown by realloc, and
 * each pass of the expand / irredundant / reduce loop builds new cubes and covers and frees the
 * old ones. Here each problem is a random multiple-output function of 8-11 inputs, given as a
 * cover of many small cubes (random cubes split on some of their free inputs); the loop expands
 * each cube as far as the function allows, drops cubes contained in others, reduces each cube to
 * the supercube of what only it covers, and repeats while the cover shrinks. Self-checks: every
 * cube carries a tag verified before it is freed, and the final cover gives exactly the
 * function's ON-set on every output. */
#include "wl_common.h"

enum { kMaxIn = 11, kMaxOut = 40, kOutWords = (kMaxOut + 63) / 64, kProblemsPerScale = 1600 };

struct cube {
  uint64_t tag;
  uint32_t dc;    /* inputs that are free (don't care) */
  uint32_t val;   /* values of the bound inputs */
  uint64_t out[]; /* outputs the cube belongs to */
};

struct cover {
  struct cube **c;
  size_t n, cap;
};

static int nin, nout, owords;
static uint64_t *on;  /* on[o * (1 << nin) / 64 ...]: the function, one bitmap per output */
static uint32_t *cnt; /* how many cubes cover each (output, minterm) */
static uint64_t cube_allocs, reallocs;

static uint64_t cube_tag(const struct cube *c) {
  uint64_t t = (uint64_t)(uintptr_t)c * 0x9E3779B97F4A7C15ULL ^ c->dc ^ (uint64_t)c->val << 32;
  for (int w = 0; w < owords; w++)
    t = t * 31 + c->out[w];
  return t;
}

static struct cube *cube_new(uint32_t dc, uint32_t val, const uint64_t *out) {
  struct cube *c = malloc(sizeof *c + owords * sizeof(uint64_t));
  if (!c) wl_fail("espresso", "malloc returned NULL");
  c->dc = dc;
  c->val = val & ~dc;
  memcpy(c->out, out, owords * sizeof(uint64_t));
  c->tag = cube_tag(c);
  cube_allocs++;
  return c;
}

static void cube_free(struct cube *c) {
  if (c->tag != cube_tag(c)) wl_fail("espresso", "a cube's contents changed");
  free(c);
}

static void cover_add(struct cover *f, struct cube *c) {
  if (f->n == f->cap) {
    f->cap = f->cap ? f->cap * 2 : 4;
    struct cube **g = realloc(f->c, f->cap * sizeof *g);
    if (!g) wl_fail("espresso", "realloc returned NULL");
    f->c = g;
    reallocs++;
  }
  f->c[f->n++] = c;
}

static int has_out(const struct cube *c, int o) {
  return c->out[o >> 6] >> (o & 63) & 1;
}

static uint64_t *on_of(int o) {
  return on + (size_t)o * ((1u << nin) / 64 ? (1u << nin) / 64 : 1);
}

/* Every minterm of the cube's input part is ON for output o. */
static int implies(uint32_t dc, uint32_t val, int o) {
  const uint64_t *bm = on_of(o);
  for (uint32_t s = dc;; s = (s - 1) & dc) {
    uint32_t m = val | s;
    if (!(bm[m >> 6] >> (m & 63) & 1)) return 0;
    if (!s) return 1;
  }
}

static int valid(uint32_t dc, uint32_t val, const uint64_t *out) {
  for (int o = 0; o < nout; o++)
    if ((out[o >> 6] >> (o & 63) & 1) && !implies(dc, val & ~dc, o)) return 0;
  return 1;
}

static void count(const struct cube *c, int delta) {
  for (int o = 0; o < nout; o++) {
    if (!has_out(c, o)) continue;
    for (uint32_t s = c->dc;; s = (s - 1) & c->dc) {
      cnt[((size_t)o << nin) | (c->val | s)] += (uint32_t)delta;
      if (!s) break;
    }
  }
}

/* Expand: free each input and add each output in a random order while the cube stays an
 * implicant; each accepted candidate replaces the old cube. */
static void expand(struct cover *f, uint64_t *seed) {
  for (size_t i = 0; i < f->n; i++) {
    struct cube *c = f->c[i];
    uint32_t start = (uint32_t)(wl_rand(seed) % (uint64_t)(nin + nout));
    for (int k = 0; k < nin + nout; k++) {
      int x = (int)((start + (uint32_t)k) % (uint32_t)(nin + nout));
      uint32_t dc = c->dc;
      uint64_t out[kOutWords];
      memcpy(out, c->out, owords * sizeof(uint64_t));
      if (x < nin) {
        if (dc >> x & 1) continue;
        dc |= 1u << x;
      } else {
        int o = x - nin;
        if (has_out(c, o)) continue;
        out[o >> 6] |= 1ULL << (o & 63);
      }
      /* The candidate is a cube of its own, as espresso builds each trial set. */
      struct cube *e = cube_new(dc, c->val, out);
      if (!valid(e->dc, e->val, e->out)) {
        cube_free(e);
        continue;
      }
      cube_free(c);
      f->c[i] = c = e;
    }
  }
}

static int contains(const struct cube *a, const struct cube *b) {
  if ((a->dc & b->dc) != b->dc || ((a->val ^ b->val) & ~a->dc)) return 0;
  for (int w = 0; w < owords; w++)
    if (b->out[w] & ~a->out[w]) return 0;
  return 1;
}

/* Irredundant (single-cube containment): a new cover without the cubes another one contains. */
static void irredundant(struct cover *f) {
  struct cover g = {0};
  for (size_t i = 0; i < f->n; i++) {
    int dropped = 0;
    for (size_t j = 0; j < f->n && !dropped; j++)
      dropped = j != i && f->c[j] && contains(f->c[j], f->c[i]);
    if (dropped) {
      cube_free(f->c[i]);
      f->c[i] = NULL;
    } else {
      cover_add(&g, f->c[i]);
    }
  }
  free(f->c);
  *f = g;
}

/* Reduce: each cube becomes the supercube of the (output, minterm) pairs only it covers, or
 * goes when there are none. */
static void reduce(struct cover *f) {
  memset(cnt, 0, ((size_t)nout << nin) * sizeof *cnt);
  for (size_t i = 0; i < f->n; i++)
    count(f->c[i], 1);
  struct cover g = {0};
  for (size_t i = 0; i < f->n; i++) {
    struct cube *c = f->c[i];
    uint32_t and_m = ~0u, or_m = 0;
    uint64_t out[kOutWords] = {0};
    int any = 0;
    for (int o = 0; o < nout; o++) {
      if (!has_out(c, o)) continue;
      for (uint32_t s = c->dc;; s = (s - 1) & c->dc) {
        uint32_t m = c->val | s;
        if (cnt[((size_t)o << nin) | m] == 1) {
          and_m &= m;
          or_m |= m;
          out[o >> 6] |= 1ULL << (o & 63);
          any = 1;
        }
        if (!s) break;
      }
    }
    count(c, -1);
    if (any) {
      struct cube *r = cube_new(and_m ^ or_m, and_m, out);
      count(r, 1);
      cover_add(&g, r);
    }
    cube_free(c);
  }
  free(f->c);
  *f = g;
}

int main(int argc, char **argv) {
  const long problems = wl_scale(argc, argv) * kProblemsPerScale;
  uint64_t seed = 0xe5b7e550ULL, final_cubes = 0, start_cubes = 0;
  on = malloc(((size_t)kMaxOut << kMaxIn) / 8);
  cnt = malloc(((size_t)kMaxOut << kMaxIn) * sizeof *cnt);
  if (!on || !cnt) wl_fail("espresso", "malloc returned NULL");
  for (long p = 0; p < problems; p++) {
    nin = 8 + (int)(wl_rand(&seed) % (kMaxIn - 7));
    nout = 4 + (int)(wl_rand(&seed) % (kMaxOut - 3));
    owords = (nout + 63) / 64;
    const uint32_t all = (1u << nin) - 1;
    memset(on, 0, ((size_t)nout << nin) / 8 + 8);
    /* The function: random cubes of 2-5 free inputs, each on a few outputs; the starting cover
     * has every such cube split on up to three of its free inputs. */
    struct cover f = {0};
    const int gens = 8 + (int)(wl_rand(&seed) % 24);
    for (int k = 0; k < gens; k++) {
      uint32_t dc = 0;
      int nfree = 2 + (int)(wl_rand(&seed) % 4);
      while (__builtin_popcount(dc) < nfree)
        dc |= 1u << (wl_rand(&seed) % (uint64_t)nin);
      uint32_t val = (uint32_t)wl_rand(&seed) & all & ~dc;
      uint64_t out[kOutWords] = {0};
      for (int j = 0, no = 1 + (int)(wl_rand(&seed) % 3); j < no; j++) {
        int o = (int)(wl_rand(&seed) % (uint64_t)nout);
        out[o >> 6] |= 1ULL << (o & 63);
      }
      for (int o = 0; o < nout; o++) {
        if (!(out[o >> 6] >> (o & 63) & 1)) continue;
        uint64_t *bm = on_of(o);
        for (uint32_t s = dc;; s = (s - 1) & dc) {
          bm[(val | s) >> 6] |= 1ULL << ((val | s) & 63);
          if (!s) break;
        }
      }
      uint32_t split = 0;
      for (uint32_t d = dc; d && __builtin_popcount(split) < 3; d &= d - 1)
        if (wl_rand(&seed) & 1) split |= d & -d;
      for (uint32_t s = split;; s = (s - 1) & split) {
        cover_add(&f, cube_new(dc & ~split, val | s, out));
        if (!s) break;
      }
    }
    start_cubes += f.n;
    size_t best = (size_t)-1;
    for (int pass = 0; pass < 8 && f.n < best; pass++) {
      best = f.n;
      expand(&f, &seed);
      irredundant(&f);
      reduce(&f);
    }
    expand(&f, &seed);
    irredundant(&f);
    /* The cover must give exactly the function. */
    memset(cnt, 0, ((size_t)nout << nin) * sizeof *cnt);
    for (size_t i = 0; i < f.n; i++)
      count(f.c[i], 1);
    for (int o = 0; o < nout; o++) {
      const uint64_t *bm = on_of(o);
      for (uint32_t m = 0; m <= all; m++)
        if (!!cnt[((size_t)o << nin) | m] != (int)(bm[m >> 6] >> (m & 63) & 1))
          wl_fail("espresso", "the minimised cover is not the function");
    }
    final_cubes += f.n;
    for (size_t i = 0; i < f.n; i++)
      cube_free(f.c[i]);
    free(f.c);
  }
  free(on);
  free(cnt);
  printf("espresso ok: %ld functions, %llu cubes minimised to %llu, %llu cube blocks, %llu "
         "reallocs, malloc from %s\n",
         problems, (unsigned long long)start_cubes, (unsigned long long)final_cubes,
         (unsigned long long)cube_allocs, (unsigned long long)reallocs, wl_malloc_lib());
  return 0;
}
