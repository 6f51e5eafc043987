/* Prints what the statistics field list (nicmalloc_stats_fields.h) says, for the ctest script
 * stats_fields.sh: "table" the README's Markdown table, "names" one field name a line. Linked
 * with libnicmalloc, so that NICMALLOC_STATS=json prints the JSON form of its run at exit. */
#include "nicmalloc.h"

#include <stdio.h>
#include <string.h>

/* The README's table cells: a '|' would end the cell. */
static void cell(const char *text) {
  for (; *text; text++)
    if (*text == '|')
      fputs("\\|", stdout);
    else
      putchar(*text);
}

#define TABLE_ROW(group, name, type, unit, label, help)                                            \
  printf("| `%s` | `%s` | %s | ", #name, #type, #unit);                                            \
  cell(help);                                                                                      \
  printf(" |\n");
#define NAME(group, name, type, unit, label, help) puts(#name);

int main(int argc, char **argv) {
  /* A call into the library, so that the link keeps it (and its exit report) in the program. */
  struct nic_stats s = NIC_STATS_INIT;
  if (nic_get_stats(&s) != 0) return 1;
  if (argc == 2 && !strcmp(argv[1], "table")) {
    puts("| field | type | unit | meaning |");
    puts("|---|---|---|---|");
    NIC_STATS_FIELDS(TABLE_ROW)
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "names")) {
    NIC_STATS_FIELDS(NAME)
    return 0;
  }
  fprintf(stderr, "usage: %s table|names\n", argv[0]);
  return 2;
}
