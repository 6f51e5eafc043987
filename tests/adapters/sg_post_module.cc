// A library that uses the adapters, built with hidden symbols so that it keeps copies of its own
// of what they keep for the process, and can be unloaded (test_sg_post.cc).
#include <nicmalloc/sg_post.h>

extern "C" __attribute__((visibility("default"))) int
sg_post_module_stream_error(const nic_endpoint *ep) {
  return nicmalloc::stream_error(ep);
}
