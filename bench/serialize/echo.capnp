@0xc7d2a1b5e4f3a901;
# The message of the serialization benchmarks: one 1024-byte (or larger) payload field.
struct Echo {
  payload @0 :Data;
}
