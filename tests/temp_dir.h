// A private directory for one test, removed with every file in it, and a file's whole text.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

struct TempDir {
  std::string path;
  explicit TempDir(mode_t mode = 0700) {
    char tmpl[] = "/tmp/nic-test-dir-XXXXXX";
    if (mkdtemp(tmpl)) path = tmpl;
    chmod(path.c_str(), mode);
  }
  ~TempDir() {
    if (DIR *d = opendir(path.c_str())) {
      while (dirent *e = readdir(d))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
          unlink((path + "/" + e->d_name).c_str());
      closedir(d);
    }
    rmdir(path.c_str());
  }
};

inline std::string read_all(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
