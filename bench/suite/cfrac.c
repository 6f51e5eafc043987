/* cfrac: modeled on cfrac (continued-fraction factoring, as run in mimalloc-bench), from its
 * published description; not the original program. Its allocation pattern: every bignum is its
 * own malloc'd block and every arithmetic result a new one, freed soon after, so the program is
 * a stream of many small, short-lived blocks with a few long-lived ones (the relations kept).
 * The continued fraction of sqrt(N) is expanded (P, Q, A mod N, as in Morrison and Brillhart's
 * method) and every Q is trial-divided over a factor base; smooth Qs are kept as relations. The
 * linear algebra that would combine them into a factor is left out: it allocates little.
 * Self-checks: every step checks A(n-1)^2 = (-1)^n Q(n) (mod N) and that the division giving
 * Q(n+1) is exact; every kept relation (smooth Qs and, as in cfrac's large-prime variation, Qs
 * with one cofactor below 2^20) is rebuilt from its factors and compared at the end. */
#include "wl_common.h"

/* A bignum: little-endian 32-bit limbs, no leading zero limbs (zero has n == 0). */
typedef struct {
  uint32_t n;
  uint32_t d[];
} big;

static uint64_t allocs;

static big *big_new(uint32_t limbs) {
  big *b = malloc(sizeof(big) + (limbs ? limbs : 1) * sizeof(uint32_t));
  if (!b) wl_fail("cfrac", "malloc returned NULL");
  b->n = limbs;
  allocs++;
  return b;
}

static big *trim(big *b) {
  while (b->n && !b->d[b->n - 1])
    b->n--;
  return b;
}

static big *big_u64(uint64_t v) {
  big *b = big_new(2);
  b->d[0] = (uint32_t)v;
  b->d[1] = (uint32_t)(v >> 32);
  return trim(b);
}

static big *big_copy(const big *a) {
  big *b = big_new(a->n);
  memcpy(b->d, a->d, a->n * sizeof(uint32_t));
  return b;
}

static int big_cmp(const big *a, const big *b) {
  if (a->n != b->n) return a->n < b->n ? -1 : 1;
  for (uint32_t i = a->n; i-- > 0;)
    if (a->d[i] != b->d[i]) return a->d[i] < b->d[i] ? -1 : 1;
  return 0;
}

static big *big_add(const big *a, const big *b) {
  if (a->n < b->n) {
    const big *t = a;
    a = b;
    b = t;
  }
  big *r = big_new(a->n + 1);
  uint64_t c = 0;
  for (uint32_t i = 0; i < a->n; i++) {
    c += (uint64_t)a->d[i] + (i < b->n ? b->d[i] : 0);
    r->d[i] = (uint32_t)c;
    c >>= 32;
  }
  r->d[a->n] = (uint32_t)c;
  return trim(r);
}

/* a - b, a >= b. */
static big *big_sub(const big *a, const big *b) {
  big *r = big_new(a->n);
  int64_t br = 0;
  for (uint32_t i = 0; i < a->n; i++) {
    int64_t v = (int64_t)a->d[i] - (i < b->n ? b->d[i] : 0) - br;
    br = v < 0;
    r->d[i] = (uint32_t)(v + (br << 32));
  }
  if (br) wl_fail("cfrac", "negative difference");
  return trim(r);
}

static big *big_mul(const big *a, const big *b) {
  big *r = big_new(a->n + b->n);
  memset(r->d, 0, r->n * sizeof(uint32_t));
  for (uint32_t i = 0; i < a->n; i++) {
    uint64_t c = 0;
    for (uint32_t j = 0; j < b->n; j++) {
      c += (uint64_t)a->d[i] * b->d[j] + r->d[i + j];
      r->d[i + j] = (uint32_t)c;
      c >>= 32;
    }
    r->d[i + b->n] = (uint32_t)c;
  }
  return trim(r);
}

/* Quotient (a new bignum) and remainder of a by a small divisor. */
static big *big_divsmall(const big *a, uint32_t m, uint32_t *rem) {
  big *q = big_new(a->n);
  uint64_t r = 0;
  for (uint32_t i = a->n; i-- > 0;) {
    r = r << 32 | a->d[i];
    q->d[i] = (uint32_t)(r / m);
    r %= m;
  }
  *rem = (uint32_t)r;
  return trim(q);
}

/* Long division (Knuth's algorithm D): quotient and remainder, both new bignums. */
static void big_divmod(const big *a, const big *b, big **qo, big **ro) {
  if (!b->n) wl_fail("cfrac", "division by zero");
  if (big_cmp(a, b) < 0) {
    *qo = big_new(0);
    *ro = big_copy(a);
    return;
  }
  if (b->n == 1) {
    uint32_t r;
    *qo = big_divsmall(a, b->d[0], &r);
    *ro = big_u64(r);
    return;
  }
  const uint32_t n = b->n, m = a->n - b->n;
  const int s = __builtin_clz(b->d[n - 1]);
  uint32_t *v = malloc(n * sizeof *v), *u = malloc((a->n + 1) * sizeof *u);
  if (!v || !u) wl_fail("cfrac", "malloc returned NULL");
  allocs += 2;
  for (uint32_t i = n - 1; i > 0; i--)
    v[i] = b->d[i] << s | (s ? (uint32_t)((uint64_t)b->d[i - 1] >> (32 - s)) : 0);
  v[0] = b->d[0] << s;
  u[a->n] = s ? (uint32_t)((uint64_t)a->d[a->n - 1] >> (32 - s)) : 0;
  for (uint32_t i = a->n - 1; i > 0; i--)
    u[i] = a->d[i] << s | (s ? (uint32_t)((uint64_t)a->d[i - 1] >> (32 - s)) : 0);
  u[0] = a->d[0] << s;
  big *q = big_new(m + 1);
  for (uint32_t j = m + 1; j-- > 0;) {
    uint64_t num = (uint64_t)u[j + n] << 32 | u[j + n - 1];
    uint64_t qh = num / v[n - 1], rh = num % v[n - 1];
    while (qh >> 32 || qh * v[n - 2] > (rh << 32 | u[j + n - 2])) {
      qh--;
      rh += v[n - 1];
      if (rh >> 32) break;
    }
    int64_t t, k = 0;
    for (uint32_t i = 0; i < n; i++) {
      uint64_t p = qh * v[i];
      t = (int64_t)u[i + j] - k - (int64_t)(p & 0xffffffffu);
      u[i + j] = (uint32_t)t;
      k = (int64_t)(p >> 32) - (t >> 32);
    }
    t = (int64_t)u[j + n] - k;
    u[j + n] = (uint32_t)t;
    if (t < 0) { /* qh was one too large: add the divisor back */
      qh--;
      uint64_t c = 0;
      for (uint32_t i = 0; i < n; i++) {
        c += (uint64_t)u[i + j] + v[i];
        u[i + j] = (uint32_t)c;
        c >>= 32;
      }
      u[j + n] += (uint32_t)c;
    }
    q->d[j] = (uint32_t)qh;
  }
  big *r = big_new(n);
  for (uint32_t i = 0; i < n; i++)
    r->d[i] = u[i] >> s | (s ? (uint32_t)((uint64_t)u[i + 1] << (32 - s)) : 0);
  free(u);
  free(v);
  *qo = trim(q);
  *ro = trim(r);
}

static big *big_mod(const big *a, const big *m) {
  big *q, *r;
  big_divmod(a, m, &q, &r);
  free(q);
  return r;
}

/* floor(sqrt(a)) by Newton's iteration from above. */
static big *big_isqrt(const big *a) {
  big *x = big_new(a->n / 2 + 1);
  memset(x->d, 0, x->n * sizeof(uint32_t));
  x->d[x->n - 1] = 1u << 31;
  trim(x);
  for (;;) {
    big *q, *r;
    big_divmod(a, x, &q, &r);
    big *s = big_add(x, q);
    uint32_t rem;
    big *y = big_divsmall(s, 2, &rem);
    free(q), free(r), free(s);
    if (big_cmp(y, x) >= 0) {
      free(y);
      return x;
    }
    free(x);
    x = y;
  }
}

/* A smooth Q kept with its factorisation (exponents over the factor base): long-lived. */
struct relation {
  struct relation *next;
  big *q;
  uint8_t *exps;
  uint32_t cofactor; /* 1, or the large prime left over */
};

enum { kBase = 120, kStepsPerScale = 150000 };

int main(int argc, char **argv) {
  const long steps = wl_scale(argc, argv) * kStepsPerScale;
  /* N: a product of two primes of about 60 bits (a 36-digit number, cfrac's usual range). */
  big *p1 = big_u64(1152921504606846883ULL), *p2 = big_u64(1152921504606847009ULL);
  big *N = big_mul(p1, p2);
  free(p1), free(p2);
  /* Factor base: small primes p with N a quadratic residue mod p (Euler's criterion). */
  uint32_t base[kBase];
  int nb = 0;
  for (uint32_t p = 2; nb < kBase; p++) {
    int prime = 1;
    for (uint32_t d = 2; d * d <= p; d++)
      prime &= p % d != 0;
    if (!prime) continue;
    uint32_t r;
    free(big_divsmall(N, p, &r));
    uint64_t e = (p - 1) / 2, x = r, acc = 1;
    for (; e; e >>= 1, x = x * x % p)
      if (e & 1) acc = acc * x % p;
    if (p == 2 || r == 0 || acc == 1) base[nb++] = p;
  }
  big *g = big_isqrt(N);
  big *P = big_u64(0), *Q = big_u64(1), *Qprev = NULL;
  big *A1 = big_u64(1), *A2 = big_u64(0); /* A(n-1), A(n-2) */
  struct relation *rels = NULL;
  long kept = 0;
  for (long n = 0; n < steps; n++) {
    /* a = floor((g + P) / Q); A(n) = a A(n-1) + A(n-2) mod N. */
    big *gp = big_add(g, P), *a, *rem;
    big_divmod(gp, Q, &a, &rem);
    free(gp), free(rem);
    big *t = big_mul(a, A1), *t2 = big_add(t, A2);
    big *An = big_mod(t2, N);
    free(t), free(t2), free(A2);
    A2 = A1;
    A1 = An;
    /* P(n+1) = a Q - P; Q(n+1) = (N - P(n+1)^2) / Q(n), which must divide exactly. */
    big *aq = big_mul(a, Q), *Pn = big_sub(aq, P);
    big *pp = big_mul(Pn, Pn), *num = big_sub(N, pp), *Qn;
    big_divmod(num, Q, &Qn, &rem);
    if (rem->n) wl_fail("cfrac", "Q(n+1) is not an exact quotient");
    free(aq), free(pp), free(num), free(rem), free(a), free(P);
    P = Pn;
    free(Qprev);
    Qprev = Q;
    Q = Qn;
    /* A(n)^2 = (-1)^(n+1) Q(n+1) (mod N). */
    big *sq = big_mul(A1, A1), *lhs = big_mod(sq, N), *rhs;
    if (n & 1) {
      rhs = big_copy(Q);
    } else {
      big *qm = big_mod(Q, N);
      rhs = qm->n ? big_sub(N, qm) : big_copy(qm);
      free(qm);
    }
    if (big_cmp(lhs, rhs)) wl_fail("cfrac", "A(n)^2 is not +-Q(n+1) mod N");
    free(sq), free(lhs), free(rhs);
    /* Trial division of Q over the factor base: a new quotient for every successful division. */
    uint8_t exps[kBase];
    big *rest = big_copy(Q);
    for (int i = 0; i < nb; i++) {
      exps[i] = 0;
      for (;;) {
        uint32_t r;
        big *qq = big_divsmall(rest, base[i], &r);
        if (r) {
          free(qq);
          break;
        }
        free(rest);
        rest = qq;
        exps[i]++;
      }
    }
    /* Smooth, or smooth but for one cofactor below 2^20 (the large-prime variation). */
    if (rest->n == 1 && rest->d[0] < (1u << 20)) {
      struct relation *rel = malloc(sizeof *rel);
      if (!rel || !(rel->exps = malloc(nb))) wl_fail("cfrac", "malloc returned NULL");
      memcpy(rel->exps, exps, nb);
      rel->q = big_copy(Q);
      rel->cofactor = rest->d[0];
      rel->next = rels;
      rels = rel;
      kept++;
    }
    free(rest);
  }
  /* Each relation's Q rebuilt from its factors. */
  while (rels) {
    struct relation *rel = rels;
    big *prod = big_u64(rel->cofactor);
    for (int i = 0; i < nb; i++)
      for (int e = 0; e < rel->exps[i]; e++) {
        big *f = big_u64(base[i]), *np = big_mul(prod, f);
        free(f), free(prod);
        prod = np;
      }
    if (big_cmp(prod, rel->q)) wl_fail("cfrac", "a relation's factors do not give its Q");
    free(prod), free(rel->q), free(rel->exps);
    rels = rel->next;
    free(rel);
  }
  free(N), free(g), free(P), free(Q), free(Qprev), free(A1), free(A2);
  printf("cfrac ok: %ld continued-fraction steps, %ld smooth relations, %llu bignums, "
         "malloc from %s\n",
         steps, kept, (unsigned long long)allocs, wl_malloc_lib());
  return 0;
}
