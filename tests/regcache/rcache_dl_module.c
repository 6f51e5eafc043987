/* Loaded and closed by test_rcache: static data a program might register and send from, in .bss
 * (its .data is file-backed, never cached). */
char rcache_dl_module_buffer[64 * 1024];

void *rcache_dl_module_buffer_addr(void) {
  return rcache_dl_module_buffer;
}
