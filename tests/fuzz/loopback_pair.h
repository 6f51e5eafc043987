// A connected TCP pair over loopback for the drivers in this folder.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

// 0, with *client connected to *server; -1 when the system refuses any step.
inline int LoopbackPair(int *client, int *server) {
  int lst = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (lst < 0 || bind(lst, (sockaddr *)&a, sizeof a) || listen(lst, 1) ||
      getsockname(lst, (sockaddr *)&a, &len)) {
    if (lst >= 0) close(lst);
    return -1;
  }
  *client = socket(AF_INET, SOCK_STREAM, 0);
  if (*client < 0 || connect(*client, (sockaddr *)&a, sizeof a)) {
    close(lst);
    return -1;
  }
  *server = accept(lst, nullptr, nullptr);
  close(lst);
  return *server < 0 ? -1 : 0;
}
