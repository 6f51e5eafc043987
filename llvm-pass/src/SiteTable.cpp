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

#include <cerrno>
#include <fcntl.h>
#include <map>
#include <optional>
#include <sys/file.h>
#include <sys/stat.h>
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

static Error tableError(std::error_code EC, const Twine &What, StringRef Path) {
  return createStringError(EC, What + " site table '" + Path + "'");
}

static std::error_code lastError() {
  return std::error_code(errno, std::generic_category());
}

/// The table's lines without Module's (a module compiled again replaces what it wrote before),
/// then Line. Lines that are not a JSON object with a module are kept as they are: they are not
/// this module's to drop.
static std::string replaceModuleLine(StringRef Old, StringRef Module, StringRef Line) {
  std::string Text;
  SmallVector<StringRef, 64> Lines;
  Old.split(Lines, '\n', -1, false);
  for (StringRef L : Lines) {
    if (L.trim().empty()) continue;
    Expected<json::Value> V = json::parse(L);
    if (!V) consumeError(V.takeError());
    const json::Object *O = V ? V->getAsObject() : nullptr;
    std::optional<StringRef> Name = O ? O->getString("module") : std::nullopt;
    if (Name && *Name == Module) continue;
    Text += L;
    Text += '\n';
  }
  Text += Line;
  Text += '\n';
  return Text;
}

static std::error_code readAll(int FD, std::string &Out) {
  char Buf[65536];
  for (off_t At = 0;;) {
    ssize_t N = ::pread(FD, Buf, sizeof Buf, At);
    if (N < 0 && errno == EINTR) continue;
    if (N < 0) return lastError();
    if (N == 0) return {};
    Out.append(Buf, size_t(N));
    At += N;
  }
}

static std::error_code writeAll(int FD, StringRef Text) {
  for (size_t Done = 0; Done < Text.size();) {
    ssize_t N = ::write(FD, Text.data() + Done, Text.size() - Done);
    if (N < 0 && errno == EINTR) continue;
    if (N < 0) return lastError();
    Done += size_t(N);
  }
  return {};
}

/// Opens and locks the table itself (never a file a symlink points to). A writer that waited
/// for the lock while another renamed a new table into place holds the old, unlinked file: it
/// starts again on the new one, or the other's line would be lost.
static Expected<int> openLockedTable(StringRef Path, struct stat &St) {
  SmallString<256> P(Path);
  for (;;) {
    int FD = ::open(P.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (FD < 0 && errno == ELOOP)
      return createStringError(lastError(), "site table '" + Path +
                                                "' is a symbolic link, which is not followed");
    if (FD < 0) return tableError(lastError(), "cannot open", Path);
    std::error_code EC;
    if (::flock(FD, LOCK_EX) != 0 || ::fstat(FD, &St) != 0) EC = lastError();
    if (!EC && !S_ISREG(St.st_mode)) EC = std::make_error_code(std::errc::invalid_argument);
    struct stat Now;
    if (!EC && ::lstat(P.c_str(), &Now) == 0 && Now.st_dev == St.st_dev && Now.st_ino == St.st_ino)
      return FD;
    ::close(FD); // closing drops the lock
    if (EC) return tableError(EC, "cannot lock (or not a regular file)", Path);
  }
}

Error writeSiteTable(StringRef Path, StringRef Module, StringRef Line) {
  struct stat St;
  Expected<int> Locked = openLockedTable(Path, St);
  if (!Locked) return Locked.takeError();
  int FD = *Locked;
  std::string Old;
  std::error_code EC = readAll(FD, Old);
  // Readers see the old table or the new one, never a part: the new one is written aside, in
  // the same directory (an exclusive create, which follows no symlink), and renamed over it.
  int TmpFD = -1;
  SmallString<256> Tmp;
  if (!EC) EC = sys::fs::createUniqueFile(Path + ".tmp%%%%%%", TmpFD, Tmp);
  if (!EC && ::fchmod(TmpFD, St.st_mode & 0777) != 0) EC = lastError();
  if (!EC) EC = writeAll(TmpFD, replaceModuleLine(Old, Module, Line));
  if (TmpFD >= 0 && ::close(TmpFD) != 0 && !EC) EC = lastError();
  if (!EC && ::rename(Tmp.c_str(), SmallString<256>(Path).c_str()) != 0) EC = lastError();
  if (EC && !Tmp.empty()) sys::fs::remove(Tmp);
  ::close(FD); // after the rename: the next writer must find the new table
  if (EC) return tableError(EC, "cannot write", Path);
  return Error::success();
}

} // namespace nicpass
