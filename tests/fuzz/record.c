/* Seed recorder: a TCP relay between one client and gpu-server that writes what the client
 * sent, byte for byte, to a file; tests/fuzz/make_corpus.py then cuts it into the seed corpus.
 *   record LISTEN_PORT SERVER_HOST:PORT OUT_FILE
 * Point a client at it (RGPU_SERVER=127.0.0.1:LISTEN_PORT RGPU_TRANSPORT=tcp RGPU_LANES=0);
 * it serves one connection and exits when either side closes. See tests/fuzz/README.md. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int dial(const char *hostport)
{
    char host[256], *colon;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    int fd;

    snprintf(host, sizeof(host), "%s", hostport);
    if ((colon = strrchr(host, ':')) == NULL)
        return -1;
    *colon = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

int main(int argc, char **argv)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, l, c, s;
    FILE *out;
    char buf[1 << 16];

    if (argc != 4) {
        fprintf(stderr, "usage: %s LISTEN_PORT SERVER_HOST:PORT OUT_FILE\n", argv[0]);
        return 2;
    }
    a.sin_port = htons((uint16_t)atoi(argv[1]));
    l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0 ||
        (out = fopen(argv[3], "wb")) == NULL) {
        perror("record");
        return 1;
    }
    if ((c = accept(l, NULL, NULL)) < 0 || (s = dial(argv[2])) < 0) {
        perror("record: connect");
        return 1;
    }
    for (;;) {
        struct pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
        if (poll(p, 2, -1) < 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            ssize_t n = read(p[i].fd, buf, sizeof(buf));
            if (n <= 0 || write(p[i ^ 1].fd, buf, (size_t)n) != n)
                goto done;
            if (i == 0)
                fwrite(buf, 1, (size_t)n, out);
        }
    }
done:
    fclose(out);
    return 0;
}
