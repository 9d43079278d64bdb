/*
 * A TCP connection flood for bench/stream.pl: for SECONDS, CONCURRENCY
 * connections at a time to 127.0.0.1:PORT, each from the next of SOURCES
 * loopback addresses (127.1.0.0 + i, round robin from i = FIRST: all of
 * 127.0.0.0/8 is local on lo).  A connection sends nothing, reads until
 * the peer closes, and is then closed with a reset (SO_LINGER 0), so that
 * the client keeps no TIME_WAIT state.  It counts as proxied when it read
 * a byte (the upstream's answer), as refused when the peer closed it
 * without one.
 *
 *   connect PORT SECONDS CONCURRENCY SOURCES [FIRST]
 *
 * prints "proxied N refused N failed N seconds S next I" on stdout (I: the
 * FIRST of a run that goes on from there).
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT  24
#endif


typedef struct {
    int       fd;
    int       got;
} conn_t;


static struct sockaddr_in  peer;
static unsigned long       sources, next_source;
static unsigned long       proxied, refused, failed;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/* a new connection from the next source address into c; -1: none */
static int
open_conn(int ep, conn_t *c)
{
    int                 fd, one;
    struct sockaddr_in  src;
    struct epoll_event  ev;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd == -1) {
        return -1;
    }

    /* the port chosen at connect(), by the whole 4-tuple */
    one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));

    memset(&src, 0, sizeof(src));
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(0x7f010000 + next_source);
    next_source = (next_source + 1) % sources;

    if (bind(fd, (struct sockaddr *) &src, sizeof(src)) == -1
        || (connect(fd, (struct sockaddr *) &peer, sizeof(peer)) == -1
            && errno != EINPROGRESS))
    {
        close(fd);
        return -1;
    }

    c->fd = fd;
    c->got = 0;

    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = c;

    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == -1) {
        close(fd);
        return -1;
    }

    return 0;
}


static void
close_conn(conn_t *c)
{
    struct linger  l;

    l.l_onoff = 1;
    l.l_linger = 0;
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(c->fd);
    c->fd = -1;
}


int
main(int argc, char **argv)
{
    int                 ep, n, i, concurrency;
    char                buf[256];
    double              seconds, start, end;
    ssize_t             r;
    conn_t             *conns, *c;
    struct epoll_event  events[256];

    if (argc != 5 && argc != 6) {
        fprintf(stderr,
                "usage: connect PORT SECONDS CONCURRENCY SOURCES [FIRST]\n");
        return 2;
    }

    memset(&peer, 0, sizeof(peer));
    peer.sin_family = AF_INET;
    peer.sin_port = htons(atoi(argv[1]));
    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    seconds = atof(argv[2]);
    concurrency = atoi(argv[3]);
    sources = strtoul(argv[4], NULL, 10);
    next_source = (argc == 6) ? strtoul(argv[5], NULL, 10) : 0;

    if (concurrency < 1 || sources < 1 || sources > 0xffffff
        || next_source >= sources)
    {
        fprintf(stderr, "connect: bad CONCURRENCY, SOURCES or FIRST\n");
        return 2;
    }

    conns = calloc(concurrency, sizeof(conn_t));
    ep = epoll_create1(0);

    if (conns == NULL || ep == -1) {
        perror("connect");
        return 1;
    }

    for (i = 0; i < concurrency; i++) {
        if (open_conn(ep, &conns[i]) == -1) {
            failed++;
            conns[i].fd = -1;
        }
    }

    start = now();
    end = start + seconds;

    while (now() < end) {
        n = epoll_wait(ep, events, 256, 100);

        for (i = 0; i < n; i++) {
            c = events[i].data.ptr;

            r = read(c->fd, buf, sizeof(buf));

            if (r > 0) {
                c->got = 1;
                continue;
            }

            if (r == -1 && errno == EAGAIN) {
                continue;
            }

            /* the peer closed (EOF or a reset): the connection is done */
            if (c->got) {
                proxied++;

            } else {
                refused++;
            }

            close_conn(c);

            if (open_conn(ep, c) == -1) {
                failed++;
            }
        }

        /* slots whose connection could not be opened try again */
        for (i = 0; i < concurrency; i++) {
            if (conns[i].fd == -1 && open_conn(ep, &conns[i]) == -1) {
                failed++;
            }
        }
    }

    printf("proxied %lu refused %lu failed %lu seconds %.3f next %lu\n",
           proxied, refused, failed, now() - start, next_source);

    return 0;
}
