#include "SiteTable.h"

#include "llvm/IR/DebugInfoMetadata.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/InstrTypes.h"
#include "llvm/IR/Instruction.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <unistd.h>

using namespace llvm;

namespace nicpass {

void locateSite(const Instruction &Call, SiteRecord &R) {
  const Function &F = *Call.getFunction();
  R.Function = F.getName().str();
  R.File = F.getParent()->getSourceFileName();
  if (const DebugLoc &Loc = Call.getDebugLoc()) {
    R.File = Loc->getFilename().str();
    R.Line = Loc.getLine();
    R.Column = Loc.getCol();
  }
  R.Ordinal = 0;
  for (const Instruction &I : instructions(F)) {
    if (&I == &Call) break;
    if (isa<CallBase>(I)) ++R.Ordinal;
  }
}

static uint64_t fnv1a(uint64_t H, StringRef S) {
  for (unsigned char C : S)
    H = (H ^ C) * 0x100000001b3ULL;
  return (H ^ 0xff) * 0x100000001b3ULL; // field separator
}

uint32_t hashSiteId(StringRef Module, const SiteRecord &R) {
  uint64_t H = 0xcbf29ce484222325ULL;
  H = fnv1a(H, Module);
  H = fnv1a(H, R.File);
  H = fnv1a(H, std::to_string(R.Line));
  H = fnv1a(H, std::to_string(R.Column));
  H = fnv1a(H, R.Function);
  if (!R.Line) H = fnv1a(H, std::to_string(R.Ordinal));
  H ^= H >> 32;
  H ^= H >> 16;
  return uint32_t(H % MaxSites);
}

static std::string where(const SiteRecord &R) {
  return R.File + ":" + std::to_string(R.Line) + ":" + std::to_string(R.Column) + " in " +
         R.Function;
}

void assignSiteIds(StringRef Module, std::vector<SiteRecord> &Sites) {
  std::map<uint32_t, size_t> ByHash, ById;
  uint32_t Free = MaxSites; // ids left: past MaxSites sites, ids are shared (and said so)
  for (size_t I = 0; I < Sites.size(); ++I) {
    SiteRecord &R = Sites[I];
    if (R.K == SiteRecord::Kind::Skipped) continue;
    R.HashId = hashSiteId(Module, R);
    auto [It, Fresh] = ByHash.emplace(R.HashId, I);
    if (!Fresh) {
      R.CollidesWith.push_back(where(Sites[It->second]));
      Sites[It->second].CollidesWith.push_back(where(R));
    }
    R.Id = R.HashId;
    if (!Free) { // every id is taken: share the hash's, and say with whom
      R.CollidesWith.push_back(where(Sites[ById[R.Id]]) + " (all " + std::to_string(MaxSites) +
                               " site ids are in use)");
      continue;
    }
    while (ById.count(R.Id))
      R.Id = (R.Id + 1) % MaxSites;
    ById[R.Id] = I;
    --Free;
  }
}

static json::Array strings(const std::vector<std::string> &V) {
  json::Array A;
  for (const std::string &S : V)
    A.push_back(S);
  return A;
}

static json::Object siteObject(const SiteRecord &R) {
  json::Object O{{"file", R.File},          {"line", R.Line},         {"column", R.Column},
                 {"function", R.Function},  {"callee", R.Callee},     {"sink", R.Sink},
                 {"sink_spec", R.SinkSpec}, {"path", strings(R.Path)}};
  if (R.K == SiteRecord::Kind::Skipped) {
    O["reason"] = R.Reason;
    return O;
  }
  O["id"] = R.Id;
  O["kind"] = R.K == SiteRecord::Kind::WrapperCall ? "wrapper-call" : "allocation";
  O["replacement"] = R.Replacement;
  if (!R.Line) O["ordinal"] = R.Ordinal;
  if (R.HashId != R.Id) O["hash_id"] = R.HashId;
  if (!R.CollidesWith.empty()) O["collides_with"] = strings(R.CollidesWith);
  if (!R.Inner.empty()) O["tags"] = strings(R.Inner);
  return O;
}

std::string siteTableLine(StringRef Module, const std::vector<SiteRecord> &Sites,
                          StringRef Incomplete) {
  json::Array Rewritten, Skipped;
  for (const SiteRecord &R : Sites)
    (R.K == SiteRecord::Kind::Skipped ? Skipped : Rewritten).push_back(siteObject(R));
  json::Object Table{{"module", Module}, {"sites", std::move(Rewritten)}};
  if (!Skipped.empty()) Table["skipped"] = std::move(Skipped);
  if (!Incomplete.empty()) Table["incomplete"] = Incomplete;
  std::string S;
  raw_string_ostream OS(S);
  OS << json::Value(std::move(Table));
  return OS.str();
}

Error appendSiteTable(StringRef Path, StringRef Line) {
  int FD;
  if (std::error_code EC =
          sys::fs::openFileForWrite(Path, FD, sys::fs::CD_OpenAlways, sys::fs::OF_Append))
    return createStringError(EC, "cannot open site table '" + Path + "'");
  std::string Text = (Line + "\n").str();
  std::error_code EC = sys::fs::lockFile(FD);
  for (size_t Done = 0; !EC && Done < Text.size();) {
    ssize_t N = ::write(FD, Text.data() + Done, Text.size() - Done);
    if (N < 0)
      EC = std::error_code(errno, std::generic_category());
    else
      Done += size_t(N);
  }
  sys::fs::unlockFile(FD);
  ::close(FD);
  if (EC) return createStringError(EC, "cannot write site table '" + Path + "'");
  return Error::success();
}

} // namespace nicpass
