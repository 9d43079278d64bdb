#!/usr/bin/perl
# A reload keeps the zone's state (and its layout, however its rules stack);
# a changed zone size starts it empty with a notice; a stop and start begins
# fresh.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new();

sub body {
    my ($size, $limit) = @_;
    return <<"EOF";
ratelimit_zone z $size;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z limit=$limit period=1h name=r;
    }
}
EOF
}

$t->write_conf(body('1m', 3), workers => 2);
$t->start();

is($t->statuses('/index.html', 2), '200 200', 'two of three spent');
$t->reload(body('1m', 3), workers => 2);
is($t->statuses('/index.html', 2), '200 429', 'reload with the same zone keeps the state');

# A named rule keeps its keys' state when its limit changes.  GCRA's state
# is the time until full budget: one hour spent at 3/h is one hour spent at
# 6/h, and the next unit comes 600 s (the new interval) after it.
$t->reload(body('1m', 6), workers => 2);
my $r = $t->get('/index.html');
is($r->{status}, 429, 'named rule, limit raised: the spent hour carries over');
is($r->{headers}{'retry-after'}, 600, 'named rule, limit raised: paced at the new interval');

$t->reload(body('2m', 6), workers => 2);
like($t->error_log, qr/\[notice\].*ratelimit_zone "z" changed size from 1048576 to 2097152 bytes: its state starts empty/,
     'a changed size is logged');
is($t->statuses('/index.html', 7), '200 200 200 200 200 200 429', 'a changed size starts empty');

# A sliding window's state lives in a block of the zone: adding such a rule
# changes the zone's layout, which starts it empty; a reload that keeps the
# layout keeps the blocks too.
my $with_window = <<'EOF';
ratelimit_zone z 2m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z limit=6 period=1h name=r;
        ratelimit zone=z algorithm=sliding_window limit=3 period=1h name=w;
    }
    location = /stats { ratelimit_stats; }
}
EOF
$t->reload($with_window, workers => 2);
like($t->error_log, qr/\[notice\].*ratelimit_zone "z": its rules' state sizes changed: its state starts empty/,
     'a new layout is logged');
is($t->statuses('/index.html', 2), '200 200', 'a new layout starts empty');
$t->reload($with_window, workers => 2);
is($t->statuses('/index.html', 2), '200 429', 'a reload keeps the sliding window blocks');

# The zone shares its room between key slots and blocks by how its rules
# stack where one keeps a block: here a key takes two slots and a block.  A
# reload that stacks them otherwise (the window alone: a slot and a block)
# keeps the zone as it was laid out, blocks and all.
my $stacked = $t->zone_stats('z')->{capacity};
$t->reload(<<'EOF', workers => 2);
ratelimit_zone z 2m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z algorithm=sliding_window limit=3 period=1h name=w;
    }
    location /r/ {
        ratelimit zone=z limit=6 period=1h name=r;
    }
    location = /stats { ratelimit_stats; }
}
EOF
is($t->statuses('/index.html', 1), '429', 'a reload that stacks the rules otherwise keeps the blocks');
is($t->zone_stats('z')->{capacity}, $stacked, '... and the zone\'s key slots');

$t->stop();
$t->start();
is($t->statuses('/index.html', 4), '200 200 200 429', 'stop and start begins fresh');
my $alone = $t->zone_stats('z')->{capacity};
cmp_ok($stacked / $alone, '>', 1.2, "a stack of two rules gets more key slots than a window alone ($stacked, $alone)");
cmp_ok($stacked / $alone, '<', 2, '... within two thirds of the room, against a third');
$t->stop();

done_testing();
