// Drives the pass through its C++ API: the pass manager, the analysis, site ids, sink specs and
// the site table.
#include "DataplaneAnalysis.h"
#include "DataplaneSitesPass.h"
#include "SinkSpecs.h"
#include "SiteTable.h"

#include "llvm/AsmParser/Parser.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <set>

using namespace llvm;
using namespace nicpass;

namespace {

const char Prelude[] = R"(
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"
declare ptr @malloc(i64)
declare void @free(ptr)
declare i64 @send(i32, ptr, i64, i32)
declare i64 @sendmsg(i32, ptr, i32)
declare void @consume(ptr)
)";

class DataplaneSitesTest : public ::testing::Test {
protected:
  std::unique_ptr<Module> parse(StringRef Body) {
    SMDiagnostic Err;
    std::string Text = (Twine(Prelude) + Body).str();
    std::unique_ptr<Module> M = parseAssemblyString(Text, Err, Ctx);
    if (!M) Err.print("test", errs());
    return M;
  }
  // Names of the functions called in F, in order.
  static std::vector<std::string> callees(const Function &F) {
    std::vector<std::string> Names;
    for (const BasicBlock &BB : F)
      for (const Instruction &I : BB)
        if (auto *Call = dyn_cast<CallBase>(&I))
          if (const Function *Callee = Call->getCalledFunction())
            Names.push_back(Callee->getName().str());
    return Names;
  }
  // %p1 ... %p70 at Base + 1 ... Base + 70 bytes into %Ptr: more offsets than
  // MaxOffsetsPerObject, so that its object is collapsed.
  static std::string overflowingGeps(const std::string &Ptr, int Base) {
    std::string Geps;
    for (int I = 1; I <= 70; ++I)
      Geps += "  %p" + std::to_string(I) + " = getelementptr i8, ptr %" + Ptr + ", i64 " +
              std::to_string(Base + I) + "\n";
    return Geps;
  }
  // Names of the allocations that reach a sink, from the analysis with the default sinks.
  static std::set<std::string> reachingSinks(const Module &M) {
    SinkCatalog Sinks;
    Sinks.addDefaults();
    DataplaneResult R = analyzeDataplane(M, Sinks);
    if (R.Exhausted) return {"(budget exhausted)"};
    std::set<std::string> Names;
    for (const auto &[Obj, Witness] : R.Reaching)
      Names.insert(R.Graph->object(Obj).Site->getName().str());
    return Names;
  }
  LLVMContext Ctx;
};

TEST_F(DataplaneSitesTest, RunsThroughThePassManager) {
  std::unique_ptr<Module> M = parse(R"(
define void @f(i32 %fd) {
  %a = call ptr @malloc(i64 64)
  %b = call ptr @malloc(i64 64)
  %r = call i64 @send(i32 %fd, ptr %a, i64 64, i32 0)
  call void @consume(ptr %b)
  ret void
}
)");
  ASSERT_TRUE(M);
  PassBuilder PB;
  LoopAnalysisManager LAM;
  FunctionAnalysisManager FAM;
  CGSCCAnalysisManager CGAM;
  ModuleAnalysisManager MAM;
  PB.registerModuleAnalyses(MAM);
  PB.registerCGSCCAnalyses(CGAM);
  PB.registerFunctionAnalyses(FAM);
  PB.registerLoopAnalyses(LAM);
  PB.crossRegisterProxies(LAM, FAM, CGAM, MAM);
  ModulePassManager MPM;
  MPM.addPass(DataplaneSitesPass(DataplaneSitesOptions{}));
  MPM.run(*M, MAM);
  EXPECT_FALSE(verifyModule(*M, &errs()));
  EXPECT_EQ(callees(*M->getFunction("f")),
            (std::vector<std::string>{"nic_malloc_site", "malloc", "send", "consume"}));
  Function *Site = M->getFunction("nic_malloc_site");
  ASSERT_TRUE(Site);
  EXPECT_TRUE(Site->hasFnAttribute(Attribute::AllocKind));
  EXPECT_TRUE(Site->hasFnAttribute(Attribute::AllocSize));
  EXPECT_EQ(Site->getFnAttribute("alloc-family").getValueAsString(), "malloc");
  EXPECT_TRUE(Site->hasRetAttribute(Attribute::NoAlias));
}

TEST_F(DataplaneSitesTest, WrapperIsClonedPerCallSite) {
  std::unique_ptr<Module> M = parse(R"(
define internal ptr @xmalloc(i64 %n) {
  %p = call ptr @malloc(i64 %n)
  ret ptr %p
}
define void @dataplane(i32 %fd) {
  %p = call ptr @xmalloc(i64 32)
  %r = call i64 @send(i32 %fd, ptr %p, i64 32, i32 0)
  ret void
}
define void @control() {
  %p = call ptr @xmalloc(i64 32)
  call void @consume(ptr %p)
  ret void
}
)");
  ASSERT_TRUE(M);
  Expected<DataplaneSitesSummary> S = runDataplaneSites(*M, {});
  ASSERT_TRUE(bool(S)) << toString(S.takeError());
  EXPECT_FALSE(verifyModule(*M, &errs()));
  EXPECT_EQ(S->Wrappers, 1u);
  ASSERT_EQ(S->Sites.size(), 1u);
  const SiteRecord &R = S->Sites[0];
  EXPECT_EQ(R.K, SiteRecord::Kind::WrapperCall);
  EXPECT_EQ(R.Function, "dataplane");
  EXPECT_EQ(R.Replacement, "xmalloc.nic_site");
  ASSERT_EQ(R.Inner.size(), 1u);
  EXPECT_NE(R.Inner[0].find("malloc() in xmalloc"), std::string::npos) << R.Inner[0];
  EXPECT_EQ(callees(*M->getFunction("dataplane"))[0], "xmalloc.nic_site");
  EXPECT_EQ(callees(*M->getFunction("control"))[0], "xmalloc");
  EXPECT_EQ(callees(*M->getFunction("xmalloc"))[0], "malloc");
  Function *Clone = M->getFunction("xmalloc.nic_site");
  ASSERT_TRUE(Clone);
  auto *Call = cast<CallBase>(&Clone->getEntryBlock().front());
  EXPECT_EQ(Call->getCalledFunction()->getName(), "nic_malloc_site");
  EXPECT_EQ(Call->getArgOperand(1), Clone->getArg(1)); // the caller's id, passed through
}

TEST_F(DataplaneSitesTest, FieldSensitivePointsTo) {
  std::unique_ptr<Module> M = parse(R"(
%pair = type { ptr, ptr }
define void @f(i32 %fd) {
  %s = alloca %pair
  %a = call ptr @malloc(i64 8)
  %b = call ptr @malloc(i64 8)
  %f1 = getelementptr %pair, ptr %s, i32 0, i32 1
  store ptr %a, ptr %s
  store ptr %b, ptr %f1
  %x = load ptr, ptr %f1
  %r = call i64 @send(i32 %fd, ptr %x, i64 8, i32 0)
  ret void
}
)");
  ASSERT_TRUE(M);
  SinkCatalog Sinks;
  Sinks.addDefaults();
  DataplaneResult R = analyzeDataplane(*M, Sinks);
  Function &F = *M->getFunction("f");
  auto Find = [&](StringRef Name) {
    for (Instruction &I : instructions(F))
      if (I.getName() == Name) return &I;
    return static_cast<Instruction *>(nullptr);
  };
  const PointeeSet &X = R.Graph->pointsTo(Find("x"));
  ASSERT_EQ(X.size(), 1u);
  ObjectId B = pointeeObject(*X.begin());
  EXPECT_EQ(R.Graph->object(B).Site, Find("b"));
  const PointeeSet &F1 = R.Graph->pointsTo(Find("f1"));
  ASSERT_EQ(F1.size(), 1u);
  EXPECT_EQ(pointeeOffset(*F1.begin()), 8u);
  ASSERT_EQ(R.Reaching.size(), 1u);
  EXPECT_EQ(R.Reaching.begin()->first, B);
}

TEST_F(DataplaneSitesTest, CollapsedObjectHasOneFieldWhateverTheOrder) {
  // A buffer addressed at 70 byte offsets (more than MaxOffsetsPerObject) is collapsed: every
  // pointer into it points to its single field, in whatever order the offsets were made, and
  // what is stored through one is loaded through any other.
  for (bool Reversed : {false, true}) {
    std::string Body = "define void @f(i32 %fd) {\n"
                       "  %a = call ptr @malloc(i64 4096)\n"
                       "  %b = call ptr @malloc(i64 64)\n";
    for (int I = 1; I <= 70; ++I) {
      int K = Reversed ? 71 - I : I;
      Body += "  %p" + std::to_string(K) + " = getelementptr i8, ptr %a, i64 " + std::to_string(K) +
              "\n";
    }
    Body += "  store ptr %b, ptr %p70\n"
            "  %x = load ptr, ptr %p3\n"
            "  %r = call i64 @send(i32 %fd, ptr %x, i64 64, i32 0)\n"
            "  ret void\n"
            "}\n";
    std::unique_ptr<Module> M = parse(Body);
    ASSERT_TRUE(M);
    SinkCatalog Sinks;
    Sinks.addDefaults();
    DataplaneResult R = analyzeDataplane(*M, Sinks);
    ASSERT_FALSE(R.Exhausted);
    Function &F = *M->getFunction("f");
    const Instruction *A = nullptr, *B = nullptr;
    for (Instruction &I : instructions(F)) {
      if (I.getName() == "a") A = &I;
      if (I.getName() == "b") B = &I;
      if (!I.getName().startswith("p")) continue;
      std::vector<Pointee> Pts(R.Graph->pointsTo(&I).begin(), R.Graph->pointsTo(&I).end());
      ASSERT_EQ(Pts.size(), 1u) << I.getName().str() << (Reversed ? " (reversed)" : "");
      EXPECT_EQ(R.Graph->object(pointeeObject(Pts[0])).Site, A);
      EXPECT_EQ(pointeeOffset(Pts[0]), 0u) << I.getName().str() << (Reversed ? " (reversed)" : "");
    }
    ASSERT_EQ(R.Reaching.size(), 1u);
    EXPECT_EQ(R.Graph->object(R.Reaching.begin()->first).Site, B);
  }
}

TEST_F(DataplaneSitesTest, SolveThatFindsAnOverflowStopsSoon) {
  // %a overflows at once; then memcpys carry 40 buffers down a chain of 40 structs. The solve
  // that finds %a overflowing is thrown away, so it must not go on with that work.
  std::string Body = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"
                     "define void @f() {\n"
                     "  %a = call ptr @malloc(i64 4096)\n" +
                     overflowingGeps("a", 0);
  for (int S = 0; S <= 40; ++S)
    Body += "  %s" + std::to_string(S) + " = call ptr @malloc(i64 320)\n";
  for (int F = 0; F < 40; ++F) {
    std::string N = std::to_string(F);
    Body += "  %b" + N + " = call ptr @malloc(i64 64)\n  %f" + N +
            " = getelementptr i8, ptr %s0, i64 " + std::to_string(8 * F) + "\n  store ptr %b" + N +
            ", ptr %f" + N + "\n";
  }
  for (int S = 1; S <= 40; ++S)
    Body += "  call void @llvm.memcpy.p0.p0.i64(ptr %s" + std::to_string(S) + ", ptr %s" +
            std::to_string(S - 1) + ", i64 320, i1 false)\n";
  Body += "  ret void\n}\n";
  std::unique_ptr<Module> M = parse(Body);
  ASSERT_TRUE(M);
  SinkCatalog Sinks;
  Sinks.addDefaults();
  PointsToGraph Finding(*M, Sinks, {});
  Finding.solve();
  ASSERT_FALSE(Finding.exhausted());
  ASSERT_EQ(Finding.overflowed().size(), 1u);
  std::set<ObjectKey> Collapse;
  for (ObjectId Obj : Finding.overflowed())
    Collapse.insert(Finding.key(Obj));
  PointsToGraph Solved(*M, Sinks, {}, Collapse);
  Solved.solve();
  ASSERT_TRUE(Solved.overflowed().empty());
  EXPECT_LT(Finding.work() * 10, Solved.work())
      << "finding: " << Finding.statistics() << "\nsolved: " << Solved.statistics();
}

TEST_F(DataplaneSitesTest, NewWrapperObjectIsNotKeptCollapsed) {
  // Each caller of @mk addresses its object at 40 offsets of its own: merged in round 1, %o
  // overflows and is collapsed. Round 2 clones @mk per call site and neither object overflows:
  // %o must not stay collapsed, or its one field (%x and %y) would fill +0 of @f's object.
  auto Offsets = [](const std::string &Ptr, int Base) {
    std::string Geps;
    for (int I = 0; I < 40; ++I)
      Geps += "  %" + Ptr + std::to_string(I) + " = getelementptr i8, ptr %" + Ptr + ", i64 " +
              std::to_string(Base + I) + "\n";
    return Geps;
  };
  std::string Body = "define internal ptr @mk() {\n"
                     "  %o = call ptr @malloc(i64 4096)\n"
                     "  %x = call ptr @malloc(i64 64)\n"
                     "  %y = call ptr @malloc(i64 64)\n"
                     "  store ptr %x, ptr %o\n"
                     "  %o8 = getelementptr i8, ptr %o, i64 8\n"
                     "  store ptr %y, ptr %o8\n"
                     "  ret ptr %o\n"
                     "}\n"
                     "define void @f(i32 %fd) {\n"
                     "  %a = call ptr @mk()\n" +
                     Offsets("a", 100) +
                     "  %v = load ptr, ptr %a\n"
                     "  %s = call i64 @send(i32 %fd, ptr %v, i64 64, i32 0)\n"
                     "  ret void\n"
                     "}\n"
                     "define void @g() {\n"
                     "  %b = call ptr @mk()\n" +
                     Offsets("b", 200) +
                     "  ret void\n"
                     "}\n";
  std::unique_ptr<Module> M = parse(Body);
  ASSERT_TRUE(M);
  EXPECT_EQ(reachingSinks(*M), std::set<std::string>{"x"});
}

TEST_F(DataplaneSitesTest, CopyFromCollapsedObjectFillsEveryField) {
  // %buf is stored at +8 of %x, which is collapsed (addressed at 70 other offsets): its one
  // field holds what any of its offsets holds, so a memcpy of %x gives it to +8 of %s as well.
  std::string Body = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"
                     "define void @f(i32 %fd) {\n"
                     "  %x = call ptr @malloc(i64 4096)\n"
                     "  %buf = call ptr @malloc(i64 64)\n"
                     "  %q = getelementptr i8, ptr %x, i64 8\n"
                     "  store ptr %buf, ptr %q\n" +
                     overflowingGeps("x", 100) +
                     "  %s = call ptr @malloc(i64 16)\n"
                     "  call void @llvm.memcpy.p0.p0.i64(ptr %s, ptr %x, i64 16, i1 false)\n"
                     "  %f = getelementptr i8, ptr %s, i64 8\n"
                     "  %v = load ptr, ptr %f\n"
                     "  %r = call i64 @send(i32 %fd, ptr %v, i64 64, i32 0)\n"
                     "  ret void\n"
                     "}\n";
  std::unique_ptr<Module> M = parse(Body);
  ASSERT_TRUE(M);
  EXPECT_EQ(reachingSinks(*M), std::set<std::string>{"buf"});
}

TEST_F(DataplaneSitesTest, WrapperOfCollapsedObjectShowsItsFieldsAtTheCallSite) {
  // @mk is a wrapper: its call gets an object of its own for what @mk allocates. %o is
  // collapsed, so %buf, stored at its +8, is in its one field, and must be seen at +8 of the
  // call site's object as well.
  std::string Body = "define internal ptr @mk() {\n"
                     "  %o = call ptr @malloc(i64 4096)\n" +
                     overflowingGeps("o", 100) +
                     "  %buf = call ptr @malloc(i64 64)\n"
                     "  %q = getelementptr i8, ptr %o, i64 8\n"
                     "  store ptr %buf, ptr %q\n"
                     "  ret ptr %o\n"
                     "}\n"
                     "define void @f(i32 %fd) {\n"
                     "  %r = call ptr @mk()\n"
                     "  %g = getelementptr i8, ptr %r, i64 8\n"
                     "  %v = load ptr, ptr %g\n"
                     "  %s = call i64 @send(i32 %fd, ptr %v, i64 64, i32 0)\n"
                     "  ret void\n"
                     "}\n";
  std::unique_ptr<Module> M = parse(Body);
  ASSERT_TRUE(M);
  EXPECT_EQ(reachingSinks(*M), std::set<std::string>{"buf"});
}

TEST_F(DataplaneSitesTest, SinkPathGoesThroughCollapsedObject) {
  // The msghdr is in a collapsed buffer (addressed at 70 other offsets): msg_iov, at +16, is in
  // its one field, and sendmsg's path must step through it to the iovec and the data.
  std::string Body = "define void @f(i32 %fd) {\n"
                     "  %m = call ptr @malloc(i64 4096)\n" +
                     overflowingGeps("m", 100) +
                     "  %iov = call ptr @malloc(i64 16)\n"
                     "  %buf = call ptr @malloc(i64 64)\n"
                     "  store ptr %buf, ptr %iov\n"
                     "  %mi = getelementptr i8, ptr %m, i64 16\n"
                     "  store ptr %iov, ptr %mi\n"
                     "  %r = call i64 @sendmsg(i32 %fd, ptr %m, i32 0)\n"
                     "  ret void\n"
                     "}\n";
  std::unique_ptr<Module> M = parse(Body);
  ASSERT_TRUE(M);
  EXPECT_EQ(reachingSinks(*M), std::set<std::string>{"buf"});
}

TEST_F(DataplaneSitesTest, RunningTwiceRewritesOnce) {
  std::unique_ptr<Module> M = parse(R"(
define void @f(i32 %fd) {
  %a = call ptr @malloc(i64 64)
  %r = call i64 @send(i32 %fd, ptr %a, i64 64, i32 0)
  ret void
}
)");
  ASSERT_TRUE(M);
  ASSERT_EQ(cantFail(runDataplaneSites(*M, {})).Sites.size(), 1u);
  EXPECT_EQ(cantFail(runDataplaneSites(*M, {})).Sites.size(), 0u);
  EXPECT_FALSE(verifyModule(*M, &errs()));
}

TEST_F(DataplaneSitesTest, AnnotatedSinkIsReadAndRemoved) {
  std::unique_ptr<Module> M = parse(R"(
%struct.nic_sink_record = type { ptr, ptr }
@.str = private unnamed_addr constant [2 x i8] c"0\00"
@rec = internal constant %struct.nic_sink_record { ptr @my_tx, ptr @.str }, section ".nic_sinks"
@llvm.compiler.used = appending global [1 x ptr] [ptr @rec], section "llvm.metadata"
declare void @my_tx(ptr)
define void @f() {
  %a = call ptr @malloc(i64 64)
  call void @my_tx(ptr %a)
  ret void
}
)");
  ASSERT_TRUE(M);
  DataplaneSitesSummary S = cantFail(runDataplaneSites(*M, {}));
  EXPECT_EQ(S.AnnotatedSinks, 1u);
  EXPECT_EQ(S.Sites.size(), 1u);
  EXPECT_FALSE(M->getNamedGlobal("rec"));
  EXPECT_FALSE(M->getNamedGlobal("llvm.compiler.used"));
  EXPECT_FALSE(verifyModule(*M, &errs()));
}

TEST(SinkSpecTest, Parses) {
  SinkSpec S = cantFail(parseSinkSpec("1:16,0/16;sockfd=0"));
  EXPECT_EQ(S.ArgIndex, 1);
  ASSERT_EQ(S.Path.size(), 2u);
  EXPECT_EQ(S.Path[0].Offset, 16u);
  EXPECT_EQ(S.Path[0].Stride, 0u);
  EXPECT_EQ(S.Path[1].Stride, 16u);
  EXPECT_EQ(S.SocketFdArg, 0);
  EXPECT_EQ(cantFail(parseSinkSpec("*")).ArgIndex, -1);
  for (const char *Bad : {"x", "1:a", "1:8/0", "1;fd=2", "-1"}) {
    Expected<SinkSpec> E = parseSinkSpec(Bad);
    EXPECT_FALSE(bool(E)) << Bad;
    consumeError(E.takeError());
  }
}

TEST(SiteIdTest, StableInRangeAndModuleSpecific) {
  SiteRecord R;
  R.File = "net.c";
  R.Line = 42;
  R.Column = 7;
  R.Function = "reply";
  uint32_t A = hashSiteId("net.c", R);
  EXPECT_EQ(A, hashSiteId("net.c", R));
  EXPECT_LT(A, MaxSites);
  EXPECT_NE(A, hashSiteId("other.c", R));
  R.Line = 43;
  EXPECT_NE(A, hashSiteId("net.c", R));
}

TEST(SiteIdTest, CollisionsAreRecordedAndProbed) {
  SiteRecord R;
  R.File = "a.c";
  R.Line = 1;
  R.Function = "f";
  std::vector<SiteRecord> Sites{R, R, R}; // same key: same hash
  assignSiteIds("a.c", Sites);
  EXPECT_EQ(Sites[0].HashId, Sites[1].HashId);
  EXPECT_EQ(Sites[0].Id, Sites[0].HashId);
  EXPECT_EQ(Sites[1].Id, (Sites[0].Id + 1) % MaxSites);
  EXPECT_EQ(Sites[2].Id, (Sites[0].Id + 2) % MaxSites);
  EXPECT_EQ(Sites[0].CollidesWith.size(), 2u);
  EXPECT_EQ(Sites[2].CollidesWith.size(), 1u);
  json::Value V = cantFail(json::parse(siteTableLine("a.c", Sites)));
  const json::Array *Arr = V.getAsObject()->getArray("sites");
  ASSERT_TRUE(Arr);
  ASSERT_EQ(Arr->size(), 3u);
  const json::Object *Second = (*Arr)[1].getAsObject();
  EXPECT_EQ(Second->getInteger("id"), int64_t(Sites[1].Id));
  EXPECT_EQ(Second->getInteger("hash_id"), int64_t(Sites[1].HashId));
  EXPECT_TRUE(Second->getArray("collides_with"));
}

TEST(SiteTableTest, OneLinePerModule) {
  SmallString<128> Path;
  ASSERT_FALSE(sys::fs::createTemporaryFile("nic-sites", "jsonl", Path));
  SiteRecord R;
  R.File = "m.c";
  R.Function = "f";
  R.Callee = "malloc";
  R.Replacement = "nic_malloc_site";
  std::vector<SiteRecord> Sites{R};
  assignSiteIds("m.c", Sites);
  ASSERT_FALSE(bool(writeSiteTable(Path, "m.c", siteTableLine("m.c", Sites))));
  ASSERT_FALSE(bool(writeSiteTable(Path, "n.c", siteTableLine("n.c", {}))));
  std::unique_ptr<MemoryBuffer> Buf = std::move(*MemoryBuffer::getFile(Path));
  SmallVector<StringRef, 4> Lines;
  Buf->getBuffer().trim().split(Lines, '\n');
  ASSERT_EQ(Lines.size(), 2u);
  json::Value First = cantFail(json::parse(Lines[0]));
  EXPECT_EQ(First.getAsObject()->getString("module"), "m.c");
  json::Value Second = cantFail(json::parse(Lines[1]));
  EXPECT_EQ(Second.getAsObject()->getArray("sites")->size(), 0u);
  sys::fs::remove(Path);
}

static std::vector<std::string> tableLines(StringRef Path) {
  std::unique_ptr<MemoryBuffer> Buf = std::move(*MemoryBuffer::getFile(Path));
  SmallVector<StringRef, 4> Lines;
  Buf->getBuffer().split(Lines, '\n', -1, false);
  return std::vector<std::string>(Lines.begin(), Lines.end());
}

// An incremental rebuild compiles a module again into the same table: its new line replaces its
// old one (else every id was listed twice and old file:line entries stayed); other modules'
// lines, and lines that are not a module's table, stay.
TEST(SiteTableTest, ModuleCompiledAgainReplacesItsLine) {
  SmallString<128> Path;
  ASSERT_FALSE(sys::fs::createTemporaryFile("nic-sites", "jsonl", Path));
  {
    std::error_code EC;
    raw_fd_ostream OS(Path, EC);
    OS << "not json\n";
  }
  ASSERT_FALSE(bool(writeSiteTable(Path, "m.c", R"({"module":"m.c","sites":[1]})")));
  ASSERT_FALSE(bool(writeSiteTable(Path, "n.c", R"({"module":"n.c","sites":[]})")));
  ASSERT_FALSE(bool(writeSiteTable(Path, "m.c", R"({"module":"m.c","sites":[2]})")));
  ASSERT_FALSE(bool(writeSiteTable(Path, "m.c", R"({"module":"m.c","sites":[3]})")));
  EXPECT_EQ(tableLines(Path),
            (std::vector<std::string>{"not json", R"({"module":"n.c","sites":[]})",
                                      R"({"module":"m.c","sites":[3]})"}));
  sys::fs::remove(Path);
}

// The table is rewritten by renaming a new file over it: a symlink at its path would have that
// rename replace the link, or a plain open write through it into whatever it points to.
TEST(SiteTableTest, SymlinkIsRefusedAndItsTargetLeftAlone) {
  SmallString<128> Target, Link;
  ASSERT_FALSE(sys::fs::createTemporaryFile("nic-target", "txt", Target));
  {
    std::error_code EC;
    raw_fd_ostream OS(Target, EC);
    OS << "precious\n";
  }
  sys::fs::createUniquePath("nic-link-%%%%%%.jsonl", Link, true);
  ASSERT_FALSE(sys::fs::create_link(Target, Link));
  Error E = writeSiteTable(Link, "m.c", R"({"module":"m.c","sites":[]})");
  EXPECT_TRUE(bool(E));
  consumeError(std::move(E));
  EXPECT_EQ(tableLines(Target), std::vector<std::string>{"precious"});
  EXPECT_TRUE(sys::fs::is_symlink_file(Link));
  sys::fs::remove(Link);
  sys::fs::remove(Target);
}

// Past MaxSites sites in one module every id is in use: ids are shared, and each such site says
// so in its collisions, instead of probing forever (a module of 66000 sites hung the pass).
TEST(SiteIds, MoreSitesThanIdsShareIdsAndSaySo) {
  std::vector<nicpass::SiteRecord> Sites(nicpass::MaxSites + 100);
  for (size_t I = 0; I < Sites.size(); ++I) {
    Sites[I].File = "gen.c";
    Sites[I].Line = unsigned(I + 1);
    Sites[I].Function = "f";
  }
  nicpass::assignSiteIds("gen.c", Sites);
  std::set<uint32_t> Ids;
  size_t Shared = 0;
  for (const nicpass::SiteRecord &R : Sites) {
    Ids.insert(R.Id);
    for (const std::string &C : R.CollidesWith)
      Shared += C.find("site ids are in use") != std::string::npos;
  }
  EXPECT_EQ(Ids.size(), size_t(nicpass::MaxSites));
  EXPECT_EQ(Shared, 100u);
}

} // namespace
