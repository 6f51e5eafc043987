# The messages of examples/kv_capnp.cc.
@0xc4a7e1f2b3d40519;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kv");

struct Request {
  id @0 :UInt64;
  op @1 :Op;
  key @2 :Text;
  value @3 :Data; # set: the new value
  enum Op {
    get @0;
    set @1;
  }
}

struct Reply {
  id @0 :UInt64;
  found @1 :Bool;
  value @2 :Data; # get: the value, sent from the store where it lies
}
