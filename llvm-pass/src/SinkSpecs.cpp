#include "SinkSpecs.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Transforms/Utils/ModuleUtils.h"

using namespace llvm;

namespace nicpass {

// x86-64 Linux layouts: msghdr.msg_iov at +16, iov_base at +0 of an iovec, mmsghdr starts with
// its msghdr, ibv_send_wr.sg_list at +16, ibv_sge.addr (a u64) at +0. Arrays of iovec/sge are
// smashed by the points-to (typed indexing), so exact offsets cover every element; no stride, as
// a stride would also match fields of whatever follows the array in the same object.
static const char DefaultSinks[] = R"(# name                        spec
send                          1
sendto                        1
sendmsg                       1:16,0
sendmmsg                      1:16,0
write                         1;sockfd=0
writev                        1:0;sockfd=0
io_uring_prep_send            2
io_uring_prep_send_zc         2
io_uring_prep_send_zc_fixed   2
io_uring_prep_sendmsg         2:16,0
io_uring_prep_sendmsg_zc      2:16,0
ibv_post_send                 1:16,0
rte_pktmbuf_attach_extbuf     1
nic_sga_add                   1
)";

StringRef defaultSinkFileText() {
  return DefaultSinks;
}

static Error specError(StringRef Text, const Twine &Why) {
  return createStringError(inconvertibleErrorCode(), "bad sink spec '" + Text + "': " + Why);
}

Expected<SinkSpec> parseSinkSpec(StringRef Text) {
  SinkSpec Spec;
  Spec.Text = Text.trim().str();
  auto [Main, Cond] = StringRef(Spec.Text).split(';');
  auto [Arg, PathText] = Main.trim().split(':');
  Arg = Arg.trim();
  if (Arg == "*")
    Spec.ArgIndex = -1;
  else if (Arg.getAsInteger(10, Spec.ArgIndex) || Spec.ArgIndex < 0)
    return specError(Text, "argument must be an index or *");
  if (!PathText.trim().empty()) {
    SmallVector<StringRef, 4> Steps;
    PathText.split(Steps, ',');
    for (StringRef StepText : Steps) {
      auto [Off, Stride] = StepText.trim().split('/');
      SinkStep Step;
      if (Off.trim().getAsInteger(0, Step.Offset))
        return specError(Text, "step offset '" + StepText + "' is not a number");
      if (!Stride.empty() && (Stride.trim().getAsInteger(0, Step.Stride) || !Step.Stride))
        return specError(Text, "step stride '" + StepText + "' is not a positive number");
      Spec.Path.push_back(Step);
    }
  }
  Cond = Cond.trim();
  if (!Cond.empty()) {
    if (!Cond.consume_front("sockfd=") || Cond.trim().getAsInteger(10, Spec.SocketFdArg) ||
        Spec.SocketFdArg < 0)
      return specError(Text, "condition must be sockfd=N");
  }
  return Spec;
}

void SinkCatalog::add(StringRef Name, SinkSpec Spec) {
  ByName[Name].push_back(std::move(Spec));
}

Error SinkCatalog::addLine(StringRef Line) {
  Line = Line.split('#').first.trim();
  if (Line.empty()) return Error::success();
  size_t Blank = Line.find_first_of(" \t");
  StringRef Name = Line.take_front(Blank),
            SpecText = Blank == StringRef::npos ? "" : Line.drop_front(Blank);
  SpecText = SpecText.trim();
  if (SpecText.empty()) SpecText = "*";
  Expected<SinkSpec> Spec = parseSinkSpec(SpecText);
  if (!Spec) return Spec.takeError();
  add(Name, std::move(*Spec));
  return Error::success();
}

void SinkCatalog::addDefaults() {
  SmallVector<StringRef, 16> Lines;
  StringRef(DefaultSinks).split(Lines, '\n');
  for (StringRef Line : Lines)
    cantFail(addLine(Line));
}

Error SinkCatalog::addFile(StringRef Path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> Buf = MemoryBuffer::getFile(Path);
  if (!Buf) return createStringError(Buf.getError(), "cannot read sink file '" + Path + "'");
  SmallVector<StringRef, 32> Lines;
  (*Buf)->getBuffer().split(Lines, '\n');
  for (StringRef Line : Lines)
    if (Error E = addLine(Line))
      return createStringError(inconvertibleErrorCode(), Path + ": " + toString(std::move(E)));
  return Error::success();
}

namespace {
/// What a NIC_SINK record holds: { void (*fn)(void), const char *spec }.
struct SinkRecord {
  Function *Fn = nullptr;
  GlobalVariable *SpecVar = nullptr;
  const ConstantDataSequential *SpecData = nullptr;
};
} // namespace

// Anything else in the section (a hand-written record, a struct of another shape) is refused
// before an operand it may not have is read.
static std::optional<SinkRecord> readSinkRecord(const GlobalVariable &G) {
  auto *Init = dyn_cast<ConstantStruct>(G.getInitializer());
  if (!Init || Init->getNumOperands() != 2) return std::nullopt;
  Constant *FnField = Init->getOperand(0), *SpecField = Init->getOperand(1);
  if (!FnField->getType()->isPointerTy() || !SpecField->getType()->isPointerTy())
    return std::nullopt;
  SinkRecord R;
  R.Fn = dyn_cast<Function>(FnField->stripPointerCasts());
  R.SpecVar = dyn_cast<GlobalVariable>(SpecField->stripPointerCasts());
  if (R.SpecVar && R.SpecVar->hasInitializer())
    R.SpecData = dyn_cast<ConstantDataSequential>(R.SpecVar->getInitializer());
  if (!R.Fn || !R.SpecData || !R.SpecData->isCString()) return std::nullopt;
  return R;
}

Expected<unsigned> SinkCatalog::takeAnnotatedSinks(Module &M) {
  SmallVector<GlobalVariable *, 4> Records;
  for (GlobalVariable &G : M.globals())
    if (G.hasSection() && G.getSection() == ".nic_sinks" && G.hasInitializer())
      Records.push_back(&G);
  SmallSetVector<GlobalVariable *, 4> SpecVars; // records may share one string
  for (GlobalVariable *G : Records) {
    std::optional<SinkRecord> R = readSinkRecord(*G);
    if (!R)
      return createStringError(inconvertibleErrorCode(), "malformed NIC_SINK record " +
                                                             G->getName() +
                                                             " (expected { function, C string })");
    Expected<SinkSpec> Spec = parseSinkSpec(R->SpecData->getAsCString());
    if (!Spec) return Spec.takeError();
    ByFunction[R->Fn].push_back(std::move(*Spec));
    SpecVars.insert(R->SpecVar);
  }
  // The records only carry information for this pass: drop them from the object file.
  SmallPtrSet<Constant *, 4> Dead(Records.begin(), Records.end());
  removeFromUsedLists(M, [&](Constant *C) { return Dead.count(C); });
  for (GlobalVariable *G : Records)
    G->eraseFromParent();
  for (GlobalVariable *SpecVar : SpecVars) {
    SpecVar->removeDeadConstantUsers();
    if (SpecVar->use_empty() && SpecVar->hasLocalLinkage()) SpecVar->eraseFromParent();
  }
  return Records.size();
}

ArrayRef<SinkSpec> SinkCatalog::lookup(const Function &F) const {
  auto It = ByFunction.find(&F);
  if (It != ByFunction.end()) return It->second;
  auto NameIt = ByName.find(F.getName());
  if (NameIt != ByName.end()) return NameIt->second;
  return {};
}

} // namespace nicpass
