#!/usr/bin/perl
# What a state file restores is bounded by the rules as they are now: a
# file written by a clock a day ahead (stepped back between the stop and
# the start; nginx run under libfaketime) is read as of now, its keys and
# bans owing what they owed when it was written, the start saying so at
# warn; a rule relaxed across a restart (same name and algorithm) makes its
# keys wait no longer than the new rule can.  (Files written by hand,
# checksum and all: tests/state_test.cc's StateForged.)
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use RLTest;

my $faketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
plan(skip_all => "no $faketime (Debian's libfaketime)") unless -f $faketime;
# nginx preloaded with both the sanitizers' runtime and libfaketime hangs
# before main (each interposes the clock's functions as it starts)
plan(skip_all => 'libfaketime and the sanitizers\' runtime do not start together') if $ENV{RL_PRELOAD};

my $t = RLTest->new();
my $p = $t->prefix;
my $file = "$p/z.state";

sub conf {
    my ($hourly) = @_;
    return <<"EOF";
ratelimit_zone z 1m state=$file state_interval=1h;
server {
    listen 127.0.0.1:%%PORT%%;
    ratelimit_headers legacy;
    location /r/ { ratelimit zone=z key=\$http_x_k $hourly name=r; alias %%PREFIX%%/html/; }
    location /b/ { ratelimit zone=z key=\$http_x_k limit=1 period=1m ban=1h name=b; alias %%PREFIX%%/html/; }
}
EOF
}

sub hit { $t->get($_[0], { 'X-K' => $_[1] }) }
sub statuses { join ' ', map { hit(@_[0, 1])->{status} } 1 .. $_[2] }

# ---- a file from a clock a day ahead ----

{
    local $ENV{RL_PRELOAD} = $faketime;
    local $ENV{FAKETIME} = '+1d';
    $t->start(conf('limit=5 period=1h'));
}
is(statuses('/r/f', 'one', 1), '200', 'a day ahead: one of five spent');
is(statuses('/r/f', 'five', 6), '200 200 200 200 200 429', 'five of five spent');
is(statuses('/b/f', 'banned', 2), '200 429', 'a key banned for an hour');
my $spent = time;
$t->stop;
ok(-s $file, 'the file written as the master stopped, a day ahead');

$t->start;
like($t->error_log, qr/\[warn\].*ratelimit_zone "z": state file "\Q$file\E" was written (\d+) ms ahead of this clock/,
     'the start says the file is from a clock ahead, at warn');
my ($ahead) = $t->error_log =~ /was written (\d+) ms ahead/;
ok($ahead > 86000 * 1000 && $ahead < 86400 * 1000 + 60 * 1000, "about a day ahead ($ahead ms)");

my $r = hit('/r/f', 'one');
is($r->{status}, 200, 'the key that spent one is admitted');
is($r->{headers}{'x-ratelimit-remaining'}, 3, 'with the four it had left, less this request');

$r = hit('/r/f', 'five');
my $waited = time - $spent;
is($r->{status}, 429, 'the spent key is still refused');
my $ra = $r->{headers}{'retry-after'};
ok($ra <= 720 && $ra >= 720 - $waited - 1, "until its first unit is back, 12 min after it was spent ($ra s)");

$r = hit('/b/f', 'banned');
is($r->{status}, 429, 'the ban holds');
$ra = $r->{headers}{'retry-after'};
ok($ra <= 3600 && $ra >= 3600 - $waited - 1, "for the rest of its hour, not a day more ($ra s)");
$t->stop;

# ---- a rule relaxed across a restart: 5 an hour, then 1000 a second ----

unlink $file;
$t->start(conf('limit=5 period=1h'));
is(statuses('/r/f', 'k', 6), '200 200 200 200 200 429', 'five an hour: spent');
$t->stop;

$t->write_conf(conf('limit=1000 period=1s'));
$t->start;
$r = hit('/r/f', 'k');
# the key is bounded when first looked up, before this answer came back
my $looked_up = time;
is($r->{status}, 429, 'the key is spent under the new rule');
is($r->{headers}{'retry-after'}, 1, 'for a second at most, as a key of 1000 a second can be');
my $wait = 1.05 - (time - $looked_up);
sleep($wait) if $wait > 0;
$r = hit('/r/f', 'k');
is($r->{status}, 200, 'a second later it is admitted');
is($r->{headers}{'x-ratelimit-remaining'}, 999, 'with the whole of the new rule\'s burst');
$t->stop;

done_testing();
