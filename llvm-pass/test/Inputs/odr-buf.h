// A template whose constructor allocates: every translation unit that uses Buf<char> emits its
// own linkonce_odr copy of the constructor, and the linker keeps one of them.
#include <cstddef>
#include <cstring>

template <typename T> struct Buf {
  T *data;
  size_t n;
  __attribute__((noinline)) explicit Buf(size_t n) : data(new T[n]), n(n) {
    memset(data, 0, n * sizeof(T));
  }
  ~Buf() { delete[] data; }
};
