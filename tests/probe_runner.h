// Runs nic_probe (tests/api/probe.c) in a child process with extra environment settings.
#pragma once

#include <map>
#include <string>
#include <vector>

struct ProbeResult {
  int exit_code = -1; // -signal when killed by a signal
  std::string out, err;
  // key=value lines printed on stdout
  std::map<std::string, std::string> values;
  long long num(const std::string &key) const;
};

ProbeResult run_probe(const std::vector<std::string> &env, const std::vector<std::string> &args);
// The same for another program (a copy of the probe somewhere else, say).
ProbeResult run_program(const std::string &path, const std::vector<std::string> &env,
                        const std::vector<std::string> &args);
// Counts the lines of text that contain needle.
int count_lines(const std::string &text, const std::string &needle);
