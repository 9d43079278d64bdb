#!/usr/bin/perl
# `ratelimit off;` removes the rules a server or location inherits, and its
# headers with them (health checks, the stats location, internal endpoints);
# a location nested in it may declare rules of its own, and one that does
# not stays off.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use RLTest;

my $t = RLTest->new();
$t->write_conf(<<'EOF');
ratelimit_zone z 1m;

server {
    listen 127.0.0.1:%%PORT%%;
    ratelimit zone=z key=$http_x_user limit=1 period=1h name=server_level;

    location /limited/ {
        alias %%PREFIX%%/html/;
    }
    location /health/ {
        ratelimit off;
        alias %%PREFIX%%/html/;

        location /health/deep/ {
            ratelimit zone=z key=$http_x_user limit=2 period=1h name=nested;
            alias %%PREFIX%%/html/;
        }
        location /health/plain/ {
            alias %%PREFIX%%/html/;
        }
    }
    location = /stats {
        ratelimit off;
        ratelimit_stats;
    }
}

server {
    listen 127.0.0.1:%%PORT%%;
    server_name off.test;
    ratelimit off;

    location / {
        alias %%PREFIX%%/html/;
    }
}
EOF
$t->start();

sub statuses {
    my ($path, $n, %h) = @_;
    my (@s, $r);
    for (1 .. $n) {
        $r = $t->get($path, { 'X-User' => 'u', %h });
        push @s, $r->{status};
    }
    return (join(' ', @s), $r);
}

my ($s, $r) = statuses('/limited/index.html', 2);
is($s, '200 429', 'the server-level rule applies where it is inherited');

($s, $r) = statuses('/health/index.html', 10);
is($s, join(' ', ('200') x 10), 'ratelimit off: 10 requests, none limited');
my @rl = grep { /ratelimit|retry-after/i } keys %{ $r->{headers} };
is("@rl", '', 'ratelimit off: no rate-limit headers');

($s, $r) = statuses('/health/deep/index.html', 3);
is($s, '200 200 429', 'a location nested in an off one declares its own rule');
is($r->{headers}{'x-ratelimit-limit'}, 2, '... and its headers are its own');

($s, $r) = statuses('/health/plain/index.html', 5);
is($s, '200 200 200 200 200', 'a location nested in an off one without rules stays off');

($s, $r) = statuses('/stats', 3);
is($s, '200 200 200', 'the stats location is not limited');
like($r->{content}, qr/"server_level":\{"allowed":1,"rejected":1/, 'stats counted only the limited location');

# the second server, by name (HTTP::Tiny sets Host itself)
my @off;
for (1 .. 5) {
    my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $t->port) or die "connect: $!";
    print $c "GET /index.html HTTP/1.0\r\nHost: off.test\r\nX-User: u\r\n\r\n";
    my $reply = do { local $/; <$c> };
    push @off, $reply =~ m{^HTTP/1\.1 (\d+)} ? $1 : '?';
    unlike($reply, qr/^X-RateLimit/mi, "ratelimit off at server level: no headers ($_)");
}
is("@off", '200 200 200 200 200', 'ratelimit off at server level');

$t->stop();
done_testing();
