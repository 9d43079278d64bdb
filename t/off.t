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
use RLTest;

my $t = RLTest->new->start(<<'EOF');
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

my $u = { 'X-User' => 'u' };
is($t->statuses('/limited/index.html', 2, $u), '200 429', 'the server-level rule applies where it is inherited');

my @r = $t->gets('/health/index.html', 10, $u);
is(RLTest::statuses_of(@r), join(' ', ('200') x 10), 'ratelimit off: 10 requests, none limited');
my @rl = grep { /ratelimit|retry-after/i } keys %{ $r[-1]{headers} };
is("@rl", '', 'ratelimit off: no rate-limit headers');

@r = $t->gets('/health/deep/index.html', 3, $u);
is(RLTest::statuses_of(@r), '200 200 429', 'a location nested in an off one declares its own rule');
is($r[-1]{headers}{'x-ratelimit-limit'}, 2, '... and its headers are its own');

is($t->statuses('/health/plain/index.html', 5, $u), '200 200 200 200 200',
   'a location nested in an off one without rules stays off');

@r = $t->gets('/stats', 3, $u);
is(RLTest::statuses_of(@r), '200 200 200', 'the stats location is not limited');
like($r[-1]{content}, qr/"server_level":\{"allowed":1,"rejected":1/, 'stats counted only the limited location');

# the second server, by name (HTTP::Tiny sets Host itself)
my @off;
for (1 .. 5) {
    my $reply = $t->get_raw('/index.html', { Host => 'off.test', 'X-User' => 'u' });
    push @off, $reply->{status};
    unlike($reply->{raw}, qr/^X-RateLimit/mi, "ratelimit off at server level: no headers ($_)");
}
is("@off", '200 200 200 200 200', 'ratelimit off at server level');

$t->stop();
done_testing();
