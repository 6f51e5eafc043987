/* barnes: modeled on the Barnes-Hut N-body simulation of SPLASH-2 (as run in mimalloc-bench),
 * from its published description; not the original program. Every time step builds an octree
 * over the bodies, one malloc'd node per cell, computes each cell's mass and centre of mass,
 * walks the tree for the force on every body (opening angle 0.5), moves the bodies and frees
 * the whole tree. Self-checks: each cell carries a tag verified before it is freed, the root's
 * mass is the total mass, and on some bodies the tree's force agrees with direct summation. */
#include <math.h>

#include "wl_common.h"

enum { kBodies = 4096, kStepsPerScale = 12, kLeafMax = 1 };
#define THETA 0.5
#define EPS2 1e-4
#define DT 1e-3

struct body {
  double pos[3], vel[3], acc[3], mass;
};

struct cell {
  uint64_t tag;
  double centre[3], half; /* the cube this cell covers */
  double com[3], mass;    /* centre of mass and mass */
  struct cell *child[8];
  struct body *body; /* a leaf's body; NULL in an inner cell */
};

static struct body bodies[kBodies];
static uint64_t cell_count;

static uint64_t cell_tag(const struct cell *c) {
  return ((uint64_t)(uintptr_t)c * 0x9E3779B97F4A7C15ULL) ^ 0xba27e5ULL;
}

static struct cell *new_cell(const double centre[3], double half) {
  struct cell *c = malloc(sizeof *c);
  if (!c) wl_fail("barnes", "malloc returned NULL");
  memset(c, 0, sizeof *c);
  memcpy(c->centre, centre, sizeof c->centre);
  c->half = half;
  c->tag = cell_tag(c);
  cell_count++;
  return c;
}

static int octant(const struct cell *c, const double pos[3]) {
  return (pos[0] > c->centre[0]) | (pos[1] > c->centre[1]) << 1 | (pos[2] > c->centre[2]) << 2;
}

static struct cell *child_for(struct cell *c, int o) {
  if (!c->child[o]) {
    double h = c->half / 2, ctr[3];
    for (int k = 0; k < 3; k++)
      ctr[k] = c->centre[k] + ((o >> k & 1) ? h : -h);
    c->child[o] = new_cell(ctr, h);
  }
  return c->child[o];
}

static void insert(struct cell *c, struct body *b, int depth) {
  for (;;) {
    int inner = 0;
    for (int o = 0; o < 8; o++)
      inner |= c->child[o] != NULL;
    if (!inner && !c->body) {
      c->body = b;
      return;
    }
    if (c->body) { /* split the leaf: its body moves one level down */
      struct body *old = c->body;
      c->body = NULL;
      if (depth > 60) wl_fail("barnes", "two bodies at one position");
      insert(child_for(c, octant(c, old->pos)), old, depth + 1);
    }
    c = child_for(c, octant(c, b->pos));
    depth++;
  }
}

static void summarise(struct cell *c) {
  if (c->body) {
    c->mass = c->body->mass;
    memcpy(c->com, c->body->pos, sizeof c->com);
    return;
  }
  double m = 0, s[3] = {0, 0, 0};
  for (int o = 0; o < 8; o++) {
    struct cell *k = c->child[o];
    if (!k) continue;
    summarise(k);
    m += k->mass;
    for (int d = 0; d < 3; d++)
      s[d] += k->mass * k->com[d];
  }
  c->mass = m;
  for (int d = 0; d < 3; d++)
    c->com[d] = m > 0 ? s[d] / m : c->centre[d];
}

static void pull(double acc[3], const double from[3], const double to[3], double mass) {
  double d[3], r2 = EPS2;
  for (int k = 0; k < 3; k++) {
    d[k] = to[k] - from[k];
    r2 += d[k] * d[k];
  }
  double f = mass / (r2 * sqrt(r2));
  for (int k = 0; k < 3; k++)
    acc[k] += f * d[k];
}

static void force(const struct cell *c, const struct body *b, double acc[3]) {
  if (c->body) {
    if (c->body != b) pull(acc, b->pos, c->body->pos, c->mass);
    return;
  }
  double d2 = 0;
  for (int k = 0; k < 3; k++)
    d2 += (c->com[k] - b->pos[k]) * (c->com[k] - b->pos[k]);
  if ((2 * c->half) * (2 * c->half) < THETA * THETA * d2) {
    pull(acc, b->pos, c->com, c->mass);
    return;
  }
  for (int o = 0; o < 8; o++)
    if (c->child[o]) force(c->child[o], b, acc);
}

static void free_tree(struct cell *c) {
  for (int o = 0; o < 8; o++)
    if (c->child[o]) free_tree(c->child[o]);
  if (c->tag != cell_tag(c)) wl_fail("barnes", "a cell's contents changed");
  free(c);
}

/* Plummer-like sphere: positions from a fixed seed, small random velocities. */
static void init_bodies(void) {
  uint64_t seed = 0xba27e5ULL;
  for (int i = 0; i < kBodies; i++) {
    double r2;
    do {
      r2 = 0;
      for (int k = 0; k < 3; k++) {
        bodies[i].pos[k] = (double)(wl_rand(&seed) >> 11) / (double)(1ULL << 53) * 2 - 1;
        r2 += bodies[i].pos[k] * bodies[i].pos[k];
      }
    } while (r2 > 1);
    for (int k = 0; k < 3; k++)
      bodies[i].vel[k] = ((double)(wl_rand(&seed) >> 11) / (double)(1ULL << 53) - 0.5) * 0.1;
    bodies[i].mass = 1.0 / kBodies;
  }
}

int main(int argc, char **argv) {
  const long steps = wl_scale(argc, argv) * kStepsPerScale;
  init_bodies();
  double total = 0;
  for (int i = 0; i < kBodies; i++)
    total += bodies[i].mass;
  double worst = 0;
  for (long s = 0; s < steps; s++) {
    double lo[3] = {1e30, 1e30, 1e30}, hi[3] = {-1e30, -1e30, -1e30}, ctr[3], half = 0;
    for (int i = 0; i < kBodies; i++)
      for (int k = 0; k < 3; k++) {
        lo[k] = fmin(lo[k], bodies[i].pos[k]);
        hi[k] = fmax(hi[k], bodies[i].pos[k]);
      }
    for (int k = 0; k < 3; k++) {
      ctr[k] = (lo[k] + hi[k]) / 2;
      half = fmax(half, (hi[k] - lo[k]) / 2);
    }
    struct cell *root = new_cell(ctr, half * 1.0001 + 1e-9);
    for (int i = 0; i < kBodies; i++)
      insert(root, &bodies[i], 0);
    summarise(root);
    if (fabs(root->mass - total) > 1e-9 * total) wl_fail("barnes", "tree mass is not the total");
    for (int i = 0; i < kBodies; i++) {
      memset(bodies[i].acc, 0, sizeof bodies[i].acc);
      force(root, &bodies[i], bodies[i].acc);
    }
    /* A few bodies against direct summation: the opening angle bounds the error. */
    for (int i = (int)(s % 97); i < kBodies; i += 997) {
      double direct[3] = {0, 0, 0}, err = 0, norm = 0;
      for (int j = 0; j < kBodies; j++)
        if (j != i) pull(direct, bodies[i].pos, bodies[j].pos, bodies[j].mass);
      for (int k = 0; k < 3; k++) {
        err += (direct[k] - bodies[i].acc[k]) * (direct[k] - bodies[i].acc[k]);
        norm += direct[k] * direct[k];
      }
      worst = fmax(worst, sqrt(err / norm));
    }
    if (worst > 0.05) wl_fail("barnes", "tree force differs from direct summation by > 5%");
    free_tree(root);
    for (int i = 0; i < kBodies; i++)
      for (int k = 0; k < 3; k++) {
        bodies[i].vel[k] += DT * bodies[i].acc[k];
        bodies[i].pos[k] += DT * bodies[i].vel[k];
      }
  }
  printf("barnes ok: %d bodies, %ld steps, %llu cells, worst force error %.4f, malloc from %s\n",
         kBodies, steps, (unsigned long long)cell_count, worst, wl_malloc_lib());
  return 0;
}
