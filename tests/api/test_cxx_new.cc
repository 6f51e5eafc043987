// C++ operator new's failures under nicmalloc, as the standard and libstdc++'s own operators give
// them: programs run with LD_PRELOAD (cxx_new_cases.cc, whose answers are checked against the C++
// runtime's too), and the LLVM pass's new sites, called from here.
#include <gtest/gtest.h>

#include "new_handlers.h"
#include "nicmalloc.h"
#include "probe_runner.h"

#include <cerrno>
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace {

const char *const nothrow_forms[] = {"scalar", "array", "aligned", "aligned_array"};
const size_t bad_alignments[] = {3, 48, size_t(24) << 20};

// The programs that run the cases: in C++, and in C with the C++ runtime loaded behind
// libnicmalloc's own libraries.
const char *const programs[] = {NIC_PROBE_PATH, NIC_CXX_NEW_C_PROGRAM};

// What the C++ runtime's own operators answer, so that a difference shows as one.
void ExpectAsTheRuntime(const std::string &program, const ProbeResult &ours,
                        const std::string &command) {
  auto theirs = run_program(program, {}, {command});
  ASSERT_EQ(theirs.exit_code, 0) << theirs.out << theirs.err;
  EXPECT_EQ(ours.values, theirs.values) << "nicmalloc:\n"
                                        << ours.out << "C++ runtime:\n"
                                        << theirs.out;
}

// Runs command in each program under LD_PRELOAD, checks what each printed with check, and that
// it is what the runtime's own operators print.
template <typename Check> void ForEachProgram(const std::string &command, Check check) {
  for (std::string program : programs) {
    SCOPED_TRACE(program);
    auto r = run_program(program, {std::string("LD_PRELOAD=") + NICMALLOC_LIBRARY}, {command});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    check(r);
    ExpectAsTheRuntime(program, r, command);
  }
}

// Each nothrow form ran the handler once and returned null, as the runtime's own do.
void ExpectEachNothrowFormCalledTheHandlerOnce(const std::string &command) {
  ForEachProgram(command, [](const ProbeResult &r) {
    for (std::string form : nothrow_forms) {
      EXPECT_EQ(r.num(form + "_calls"), 1) << form << "\n" << r.out;
      EXPECT_EQ(r.num(form + "_null"), 1) << form << "\n" << r.out;
    }
  });
}

// A nothrow operator new that fails calls the new-handler, as the throwing one does, and
// returns null once there is none left.
TEST(CxxNew, NothrowFormsCallTheNewHandler) {
  ExpectEachNothrowFormCalledTheHandlerOnce("nothrow-handler");
}

// A handler may throw std::bad_alloc: a nothrow form returns null then, and the program goes on.
TEST(CxxNew, NothrowFormsReturnNullWhenTheHandlerThrows) {
  ExpectEachNothrowFormCalledTheHandlerOnce("throwing-handler");
}

// An alignment that is not a power of two: bad_alloc, or null, at once (no handler can make the
// request possible), never a block aligned to something else.
TEST(CxxNew, AlignmentsNotPowersOfTwoAreRefused) {
  ForEachProgram("bad-alignment", [](const ProbeResult &r) {
    for (size_t align : bad_alignments) {
      const std::string key = "align_" + std::to_string(align);
      EXPECT_EQ(r.num(key + "_threw"), 1) << r.out;
      EXPECT_EQ(r.num(key + "_array_threw"), 1) << r.out;
      EXPECT_EQ(r.num(key + "_nothrow_null"), 1) << r.out;
      EXPECT_EQ(r.num(key + "_array_nothrow_null"), 1) << r.out;
      EXPECT_EQ(r.num(key + "_handler_calls"), 0) << r.out;
    }
  });
}

// A program that replaces only the basic operator new and delete of each family gets the
// standard's default definitions of the other forms, which call those: every new and delete it
// makes reaches its own operators, linked with nicmalloc or preloaded, as without nicmalloc, and
// what they throw, a nothrow form turns into null. The LLVM pass's new sites allocate through
// them too (the linked program calls them: 4 more calls of each).
TEST(CxxNew, ReplacedBasicOperatorsServeEveryFormOfTheirFamily) {
  const std::string preload = std::string("LD_PRELOAD=") + NICMALLOC_LIBRARY;
  const std::pair<std::string, std::vector<std::string>> runs[] = {
      {NIC_CXX_REPLACED_PROGRAM_LINKED, {}},
      {NIC_CXX_REPLACED_PROGRAM, {preload}},
      {NIC_CXX_REPLACED_PROGRAM, {}}};
  for (const auto &[program, env] : runs) {
    SCOPED_TRACE(program + (env.empty() ? "" : " under " + env[0]));
    auto r = run_program(program, env, {});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (std::string form : {"new", "delete", "aligned_new", "aligned_delete"}) {
      EXPECT_GE(r.num(form + "_calls"), 7) << r.out;
      EXPECT_EQ(r.num(form + "_seen"), r.num(form + "_calls")) << form << "\n" << r.out;
    }
    EXPECT_EQ(r.num("new_calls"), program == NIC_CXX_REPLACED_PROGRAM_LINKED ? 12 : 8) << r.out;
    EXPECT_EQ(r.num("impossible_nothrow_nulls"), 4) << r.out;
  }
}

// The pass's nothrow sites, on and off, fail as the operators they replace.
TEST(CxxNew, NothrowSitesCallTheNewHandler) {
  const uint32_t site = 11;
  const std::nothrow_t &tag = std::nothrow;
  for (int on : {1, 0}) {
    ASSERT_EQ(nic_site_set_enabled(site, on), 0);
    for (void (*handler)() : {new_handler_giving_up, new_handler_throwing}) {
      new_handler_calls = 0;
      std::set_new_handler(handler);
      EXPECT_EQ(nic_new_nothrow_site(SIZE_MAX - 4096, &tag, site), nullptr);
      EXPECT_EQ(new_handler_calls, 1) << "site on: " << on;
      new_handler_calls = 0;
      std::set_new_handler(handler);
      EXPECT_EQ(nic_new_aligned_nothrow_site(SIZE_MAX - 4096, 64, &tag, site), nullptr);
      EXPECT_EQ(new_handler_calls, 1) << "site on: " << on;
      std::set_new_handler(nullptr);
    }
  }
  ASSERT_EQ(nic_site_set_enabled(site, 1), 0);
}

TEST(CxxNew, SitesRefuseAlignmentsNotPowersOfTwoWithoutTheHandler) {
  const uint32_t site = 11;
  const std::nothrow_t &tag = std::nothrow;
  for (size_t align : bad_alignments) {
    new_handler_calls = 0;
    std::set_new_handler(new_handler_throwing);
    EXPECT_THROW(nic_new_aligned_site(100, align, site), std::bad_alloc) << align;
    errno = 0;
    EXPECT_EQ(nic_new_aligned_nothrow_site(100, align, &tag, site), nullptr) << align;
    EXPECT_EQ(errno, EINVAL);
    std::set_new_handler(nullptr);
    EXPECT_EQ(new_handler_calls, 0) << align;
  }
}

} // namespace
