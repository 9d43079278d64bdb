package RLFakeRedis;
# Something answering on a Redis port, for tests of what a hostile or broken
# server may send: a forked TCP server on a free loopback port (a process a
# connection) that reads each command (RESP) and answers it with the bytes
# the test set last: whole, one byte a write (with a small sleep between),
# or the first half and then nothing.  AUTH, SELECT and ASKING get "+OK"
# unless the test sets their answer too.
#
#   my $fake = RLFakeRedis->new;
#   $fake->reply(":1\r\n");                  # every other command gets this
#   $fake->reply($bytes, split => 1);        # one byte a write, 1 ms apart
#   $fake->reply($bytes, stall => 1);        # half of it, then nothing
#   $fake->reply_to('AUTH', ":1\r\n");       # what AUTH gets
#   my @names = $fake->commands;             # the commands read so far
#   $fake->stop;                             # also at exit
use strict;
use warnings;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use Time::HiRes qw(sleep);
use RLTest;

my @running;

sub new {
    my ($class) = @_;
    my $dir = tempdir('ngx-ratelimit-fake-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 64, ReuseAddr => 1)
        or die "RLFakeRedis: listen: $!\n";
    my $self = bless { dir => $dir, port => $listen->sockport }, $class;
    $self->reply("-ERR no reply set\r\n");
    $self->{pid} = RLTest::tcp_server($listen, sub { $self->serve($_[0]) });
    push @running, $self->{pid};
    return $self;
}

sub port { $_[0]{port} }

sub write_file {
    my ($path, $text) = @_;
    open(my $fh, '>', "$path.tmp") or die "RLFakeRedis: $path: $!\n";
    binmode $fh;
    print $fh $text;
    close $fh;
    rename("$path.tmp", $path) or die "RLFakeRedis: $path: $!\n";
}

sub read_file {
    my ($path) = @_;
    open(my $fh, '<', $path) or return undef;
    binmode $fh;
    local $/;
    return <$fh>;
}

# The answer to every command but AUTH, SELECT and ASKING, from now on.
sub reply {
    my ($self, $bytes, %opt) = @_;
    my $mode = $opt{split} ? 'split' : $opt{stall} ? 'stall' : 'whole';
    write_file("$self->{dir}/reply", "$mode\n$bytes");
}

sub reply_to {
    my ($self, $command, $bytes) = @_;
    write_file("$self->{dir}/reply.\U$command", "whole\n$bytes");
}

sub commands {
    my ($self) = @_;
    return split /\n/, read_file("$self->{dir}/commands") // '';
}

# One connection: commands in, answers out, until the peer closes.
sub serve {
    my ($self, $c) = @_;
    binmode $c;
    my $buf = '';
    while (1) {
        while (defined(my $cmd = take_command(\$buf))) {
            my $name = uc($cmd->[0] // '');
            open(my $log, '>>', "$self->{dir}/commands");
            print $log "$name\n";
            close $log;
            my $answer = read_file("$self->{dir}/reply.$name")
                // ($name =~ /^(AUTH|SELECT|ASKING)$/ ? "whole\n+OK\r\n" : read_file("$self->{dir}/reply"));
            my ($mode, $bytes) = split /\n/, $answer, 2;
            if ($mode eq 'split') {
                for my $byte (split //, $bytes) {
                    syswrite($c, $byte) or return;
                    sleep 0.001;
                }
            } elsif ($mode eq 'stall') {
                syswrite($c, substr($bytes, 0, int(length($bytes) / 2)));
                sleep 3600;   # until killed
            } else {
                my $off = 0;
                while ($off < length $bytes) {
                    my $n = syswrite($c, $bytes, length($bytes) - $off, $off) or return;
                    $off += $n;
                }
            }
        }
        my $n = sysread($c, $buf, 65536, length $buf);
        return unless $n;
    }
}

# A command (an array of bulk strings) from the front of $$buf, or undef
# while it is not all there.
sub take_command {
    my ($buf) = @_;
    return undef unless $$buf =~ /\A\*(\d+)\r\n/;
    my ($n, $at) = ($1, length($&));
    my @words;
    for (1 .. $n) {
        return undef unless substr($$buf, $at) =~ /\A\$(\d+)\r\n/;
        my $len = $1;
        $at += length($&);
        return undef if length($$buf) < $at + $len + 2;
        push @words, substr($$buf, $at, $len);
        $at += $len + 2;
    }
    substr($$buf, 0, $at) = '';
    return \@words;
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    kill 'KILL', -$pid;   # its process group: the server and its connections
    waitpid($pid, 0);
    @running = grep { $_ != $pid } @running;
}

END {
    local $?;
    for my $pid (@running) {
        kill 'KILL', -$pid;
        waitpid($pid, 0);
    }
}

1;
