/* The examples' command lines, read strictly: the flags a program documents, in any order, and
 * counts that are whole numbers from 1 up. Anything else (an unknown word, a number with
 * letters in it, 0, a flag given twice, a count too many) is refused with the usage line and
 * exit status 2: read loosely, a word became a count of 0 and a check over nothing said "ok". */
#ifndef EXAMPLE_ARGS_H
#define EXAMPLE_ARGS_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One thing a command line may hold: a flag ("--check"), a flag with a count after it
 * ("--workers", count set), or, with flag NULL, the next positional count. A flag's given is set
 * when it is there; a count is left as it was (its default) when it is not. */
struct example_arg {
  const char *flag;
  bool *given;
  unsigned long *count;
  unsigned long max;
};

/* A count: decimal digits only, from 1 to max. */
static inline bool example_count(const char *s, unsigned long max, unsigned long *out) {
  if (s[0] < '0' || s[0] > '9') return false;
  char *end;
  errno = 0;
  const unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || v == 0 || v > max) return false;
  *out = v;
  return true;
}

static inline int example_refuse(const char *usage, const char *why, const char *word,
                                 unsigned long max) {
  const char *name_end = strchr(usage, ' ');
  fprintf(stderr, "%.*s: %s", name_end ? (int)(name_end - usage) : (int)strlen(usage), usage, why);
  if (word) fprintf(stderr, " '%s'", word);
  if (max) fprintf(stderr, " (a count from 1 to %lu)", max);
  fprintf(stderr, "\nusage: %s\n", usage);
  return 2;
}

/* Reads argv against the n entries of args: 0, or 2 once the reason and the usage are said (the
 * usage's first word names the program). */
static inline int example_args(int argc, char **argv, const char *usage,
                               const struct example_arg *args, int n) {
  int positional = 0; /* positional counts taken so far */
  for (int i = 1; i < argc; i++) {
    const char *word = argv[i];
    const struct example_arg *a = NULL;
    if (word[0] == '-') {
      for (int k = 0; k < n && !a; k++)
        if (args[k].flag && !strcmp(args[k].flag, word)) a = &args[k];
      if (!a) return example_refuse(usage, "unknown argument", word, 0);
      if (*a->given) return example_refuse(usage, "given twice", word, 0);
      *a->given = true;
      if (!a->count) continue;
      if (++i == argc) return example_refuse(usage, "a count must follow", word, 0);
      word = argv[i];
    } else {
      for (int k = 0, seen = 0; k < n && !a; k++)
        if (!args[k].flag && seen++ == positional) a = &args[k];
      if (!a) return example_refuse(usage, "one argument too many", word, 0);
      positional++;
    }
    if (!example_count(word, a->max, a->count))
      return example_refuse(usage, "not a count", word, a->max);
  }
  return 0;
}

#endif
