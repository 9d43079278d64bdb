#!/usr/bin/perl
# Exactness under concurrency: 2 worker processes, 64 concurrent keep-alive
# connections, 2,000 requests for one key against limit=100 period=1h:
# exactly 100 pass, every other one is a 429 with Retry-After; ten times
# over.  Then with two stacked rules in two zones: the second rule spends
# exactly what the first admitted (no partial consumption).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new->start(<<'EOF', workers => 2);
ratelimit_zone one 1m;
ratelimit_zone two 1m;
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    location /single/ {
        ratelimit zone=one key=$http_x_key limit=100 period=1h;
        alias %%PREFIX%%/html/;
    }
    location /stacked/ {
        ratelimit zone=one key=$http_x_key limit=100 period=1h name=first;
        ratelimit zone=two key=$http_x_key limit=1000 period=1h name=second;
        alias %%PREFIX%%/html/;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF

# 2,000 requests over 64 keep-alive connections at once
sub burst {
    my ($path, $key) = @_;
    return RLTest::burst(ports => [ $t->port ], path => $path, key => $key, total => 2000, conns => 64);
}

for my $round (1 .. 10) {
    my ($ok, $limited, $other) = burst('/single/index.html', "single-$round");
    is("$ok $limited $other", '100 1900 0', "round $round: exactly 100 admitted of 2,000, the rest 429 + Retry-After");
}

for my $round (1 .. 3) {
    my ($ok, $limited, $other) = burst('/stacked/index.html', "stacked-$round");
    is("$ok $limited $other", '100 1900 0', "stacked round $round: exactly 100 admitted");
}
my $s = $t->stats;
is($s->{zones}{two}{rules}{second}{allowed}, 300, 'stacked: the second rule spent exactly the 300 admitted');
is($s->{zones}{one}{rules}{first}{rejected}, 3 * 1900, 'stacked: every rejection is the first rule\'s');
is($s->{zones}{one}{rules}{gcra_100_1h}{allowed}, 1000, 'single: 1,000 admitted over ten rounds');

$t->stop();
done_testing();
