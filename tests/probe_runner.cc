#include "probe_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>

extern char **environ;

long long ProbeResult::num(const std::string &key) const {
  auto it = values.find(key);
  if (it == values.end()) throw std::runtime_error("probe printed no " + key + "\n" + out + err);
  return std::stoll(it->second);
}

static void drain(int out_fd, int err_fd, std::string &out, std::string &err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0 && poll(fds, 2, -1) > 0) {
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        fds[i].fd = -1;
        open_fds--;
      } else {
        (i == 0 ? out : err).append(buf, n);
      }
    }
  }
}

ProbeResult run_probe(const std::vector<std::string> &env, const std::vector<std::string> &args) {
  return run_program(NIC_PROBE_PATH, env, args);
}

ProbeResult run_program(const std::string &path, const std::vector<std::string> &env,
                        const std::vector<std::string> &args) {
  std::vector<char *> envp, argv;
  // getenv returns the first match, so the test's settings go first.
  for (auto &e : env)
    envp.push_back(const_cast<char *>(e.c_str()));
  for (char **e = environ; *e; e++)
    envp.push_back(*e);
  envp.push_back(nullptr);
  argv.push_back(const_cast<char *>(path.c_str()));
  for (auto &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC)) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid;
  int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) throw std::runtime_error("posix_spawn failed");
  ProbeResult r;
  drain(out_pipe[0], err_pipe[0], r.out, r.err);
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos && line.find(' ') > eq)
      r.values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return r;
}

int count_lines(const std::string &text, const std::string &needle) {
  std::istringstream lines(text);
  int n = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find(needle) != std::string::npos) n++;
  return n;
}
