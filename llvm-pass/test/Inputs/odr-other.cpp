// The second translation unit of odr-two-units.cpp: constructs a Buf<char> it never sends.
#include "odr-buf.h"
#include <nicmalloc.h>
#include <cstdio>

void other() {
  Buf<char> kept(4096);
  kept.data[0] = 'k';
  printf("other: %s %c\n", nic_is_dataplane(kept.data) ? "dataplane" : "control", kept.data[0]);
}
