/* Loaded and closed by test_rcache: static data a program might register and send from. */
char rcache_dl_module_buffer[64 * 1024] = {1};

void *rcache_dl_module_buffer_addr(void) {
  return rcache_dl_module_buffer;
}
