# The message the adapter suites send: nested structs, lists, and blobs of every size.
@0xe5b4a257071781a8;

struct Inner {
  id @0 :UInt32;
  name @1 :Text;
  tags @2 :List(Text);
}

struct Outer {
  seq @0 :UInt64;
  inner @1 :Inner;
  items @2 :List(Inner);
  numbers @3 :List(UInt32);
  blob @4 :Data;
  text @5 :Text;
  blobs @6 :List(Data);
}
